package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

func newInvocationsCmd(env cliEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "invocations",
		Aliases: []string{"inv"},
		Short:   "list, show and act on invocations (list, show, cancel, resume, restart, kill, purge, bulk)",
	}
	client := addAdminFlags(cmd)
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print the admin API's JSON answer")

	var f listFlags
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "list invocations, newest first",
		Example: `  raftgate invocations list --status failed --since 1h
  raftgate invocations list --service Greeter --key order-42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := f.query(time.Now())
			if err != nil {
				return err
			}
			var l admin.InvocationList
			if err := client().do(cmd.Context(), "GET", "/invocations?"+q.Encode(), nil, &l); err != nil {
				return fmt.Errorf("list invocations: %w", err)
			}
			if asJSON {
				return printJSON(env.stdout, l)
			}
			return printInvocationList(env.stdout, l)
		},
	}
	fl := list.Flags()
	fl.StringVar(&f.status, "status", "", "pending, running, queued, scheduled, paused, completed or failed")
	fl.StringVar(&f.service, "service", "", "only this service")
	fl.StringVar(&f.handler, "handler", "", "only this handler")
	fl.StringVar(&f.key, "key", "", "only this idempotency key")
	fl.StringVar(&f.objectKey, "object-key", "", "only invocations of this object key or workflow id (keyed services)")
	fl.DurationVar(&f.since, "since", 0, "only those created in this last duration (like 15m)")
	fl.StringVar(&f.after, "after", "", "only those created at or after this RFC 3339 time")
	fl.StringVar(&f.before, "before", "", "only those created before this RFC 3339 time")
	fl.IntVar(&f.limit, "limit", 20, "at most this many")
	fl.StringVar(&f.cursor, "cursor", "", "continue a listing (the cursor it printed)")

	var full bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "show an invocation: status, attempts, timestamps, request and result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/invocations/" + url.PathEscape(args[0])
			if full {
				path += "?full=true"
			}
			var v admin.InvocationView
			if err := client().do(cmd.Context(), "GET", path, nil, &v); err != nil {
				return fmt.Errorf("show invocation %s: %w", args[0], err)
			}
			if asJSON {
				return printJSON(env.stdout, v)
			}
			return printInvocation(env.stdout, v)
		},
	}
	show.Flags().BoolVar(&full, "full", false, "whole bodies (default: the first 4 KiB)")

	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "cancel an invocation: it completes with a cancelled result (409) unless it completed already",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/invocations/" + url.PathEscape(args[0])
			// The answer to DELETE looks the same whether this call or an
			// earlier one cancelled it, so the status is read first: a
			// completed invocation is reported as it stands, not cancelled
			// "again".
			var v admin.InvocationView
			if err := client().do(cmd.Context(), "GET", path, nil, &v); err != nil {
				return fmt.Errorf("cancel invocation %s: %w", args[0], err)
			}
			already := v.Status == "completed"
			if !already {
				if err := client().do(cmd.Context(), "DELETE", path, nil, &v); err != nil {
					return fmt.Errorf("cancel invocation %s: %w", args[0], err)
				}
			}
			if asJSON {
				return printJSON(env.stdout, v)
			}
			cancelled := v.Result != nil && v.Result.Error == "cancelled"
			switch {
			case already && cancelled:
				fmt.Fprintf(env.stdout, "%s was already cancelled\n", v.ID)
			case cancelled:
				fmt.Fprintf(env.stdout, "cancelled %s\n", v.ID)
			default:
				fmt.Fprintf(env.stdout, "%s had already completed; its result stands\n", v.ID)
			}
			return nil
		},
	}
	cmd.AddCommand(list, show, cancel)
	cmd.AddCommand(lifecycleCmds(env, client, &asJSON)...)
	return cmd
}

// listFlags are invocations list's filters.
type listFlags struct {
	status, service, handler, key string
	objectKey                     string
	since                         time.Duration
	after, before, cursor         string
	limit                         int
}

func (f listFlags) query(now time.Time) (url.Values, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("status", f.status)
	set("service", f.service)
	set("handler", f.handler)
	set("key", f.key)
	set("objectKey", f.objectKey)
	set("createdAfter", f.after)
	set("createdBefore", f.before)
	set("cursor", f.cursor)
	if f.since > 0 {
		if f.after != "" {
			return nil, fmt.Errorf("--since and --after both set: give one")
		}
		q.Set("createdAfter", now.Add(-f.since).UTC().Format(time.RFC3339Nano))
	}
	q.Set("limit", strconv.Itoa(f.limit))
	return q, nil
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printInvocationList(out io.Writer, l admin.InvocationList) error {
	if len(l.Invocations) == 0 {
		fmt.Fprintf(out, "no invocations match (looked at %d)\n", l.Scanned)
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "ID\tSTATUS\tSERVICE/HANDLER\tKEY\tATTEMPTS\tACCEPTED\tRESULT\tPARTITION\tHELD BY\n")
		for _, inv := range l.Invocations {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", inv.ID, inv.Status, target(inv.Service, inv.Key, inv.Handler),
				dash(inv.IdempotencyKey), inv.Attempts, dash(inv.AcceptedAt), resultText(inv), inv.Partition, dash(inv.HeldBy))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if l.NextCursor != "" {
		fmt.Fprintf(out, "more: add --cursor %s\n", l.NextCursor)
	}
	return nil
}

// target names what an invocation calls as its ingress path does:
// Service/handler, or Object/key/handler for a keyed service.
func target(service, key, handler string) string {
	if key != "" {
		return service + "/" + key + "/" + handler
	}
	return service + "/" + handler
}

func resultText(inv admin.InvocationSummary) string {
	switch {
	case inv.Status != "completed":
		return "-"
	case inv.Failed:
		return fmt.Sprintf("%d failed", inv.ResultStatus)
	default:
		return strconv.Itoa(int(inv.ResultStatus))
	}
}

func printInvocation(out io.Writer, v admin.InvocationView) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	leader := "none known"
	if v.Leader != 0 {
		leader = "node " + strconv.FormatUint(v.Leader, 10)
	}
	rows := [][2]string{
		{"id", v.ID},
		{"status", v.Status},
		{"service", target(v.Service, v.Key, v.Handler)},
		{"idempotency key", dash(v.IdempotencyKey)},
		{"partition", fmt.Sprintf("%d (leader: %s)", v.Partition, leader)},
		{"attempts", strconv.Itoa(int(v.Attempts))},
		{"last error", dash(v.LastError)},
		{"accepted", dash(v.AcceptedAt)},
		{"execution time", dash(v.ExecutionTime)},
		{"next retry", dash(v.NextRetryAt)},
		{"completed", dash(v.CompletedAt)},
	}
	if v.Priority != 0 {
		rows = append(rows, [2]string{"priority", strconv.Itoa(int(v.Priority))})
	}
	for _, link := range [][2]string{{"held by", v.HeldBy}, {"restarted as", v.RestartedAs}, {"restarted from", v.RestartedFrom}, {"delivered to", v.URL}} {
		if link[1] != "" {
			rows = append(rows, link)
		}
	}
	if v.QueuePosition != nil {
		rows = append(rows, [2]string{"queue position", fmt.Sprintf("%d ahead of it", *v.QueuePosition)})
	}
	if r := v.Result; r != nil {
		res := strconv.Itoa(int(r.Status))
		if r.Failed {
			res += " failed"
		}
		if r.Error != "" {
			res += ": " + r.Error
		}
		rows = append(rows, [2]string{"result", res})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printBody(out, "request", v.Request)
	if v.Result != nil {
		printBody(out, "result", &v.Result.BodyView)
	}
	return nil
}

func printBody(out io.Writer, name string, b *admin.BodyView) {
	if b == nil {
		return
	}
	fmt.Fprintf(out, "\n%s body (%d bytes, %s):\n", name, b.BodyBytes, dash(b.ContentType))
	switch {
	case b.Body != "":
		fmt.Fprintln(out, b.Body)
	case b.BodyBase64 != "":
		fmt.Fprintf(out, "(binary, base64) %s\n", b.BodyBase64)
	}
	if b.BodyTruncated {
		fmt.Fprintln(out, "(truncated: --full shows the whole body while it is retained)")
	}
}
