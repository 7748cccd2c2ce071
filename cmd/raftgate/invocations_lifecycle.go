package main

import (
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

// lifecycleCmds are invocations resume|restart|kill|purge ID and bulk:
// operators' actions, each through the admin API.
func lifecycleCmds(env cliEnv, client func() *adminClient, asJSON *bool) []*cobra.Command {
	var resumeURL string
	action := func(name, short string) *cobra.Command {
		return &cobra.Command{
			Use:   name + " ID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var body any
				if name == "resume" && resumeURL != "" {
					body = map[string]string{"url": resumeURL}
				}
				path := "/invocations/" + url.PathEscape(args[0]) + "/" + name
				var v admin.InvocationView
				if err := client().do(cmd.Context(), "POST", path, body, &v); err != nil {
					return fmt.Errorf("%s invocation %s: %w", name, args[0], err)
				}
				if *asJSON {
					return printJSON(env.stdout, v)
				}
				switch name {
				case "restart":
					fmt.Fprintf(env.stdout, "restarted %s as %s (%s)\n", args[0], v.ID, v.Status)
				case "purge":
					fmt.Fprintf(env.stdout, "purged %s\n", args[0])
				default:
					fmt.Fprintf(env.stdout, "%s %s: now %s\n", name, v.ID, v.Status)
				}
				return nil
			},
		}
	}
	resume := action("resume", "deliver a paused (or backing-off) invocation now; its attempts start again")
	resume.Flags().StringVar(&resumeURL, "url", "", "deliver to this service URL from now on")
	restart := action("restart", "run a completed or paused invocation again as a new invocation with the same input")
	kill := action("kill", "complete an invocation now as killed, without calling its service again")
	purge := action("purge", "drop a completed invocation's record and result now (its idempotency key becomes free)")

	var f listFlags
	var dryRun bool
	var poll time.Duration
	bulk := &cobra.Command{
		Use:   "bulk cancel|kill|pause|resume|purge",
		Short: "apply an action to every invocation matching the filters, through the log; waits and prints progress",
		Example: `  raftgate invocations bulk resume --status paused --service Greeter
  raftgate invocations bulk cancel --service Greeter --created-before 2026-01-02T00:00:00Z --dry-run`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"cancel", "kill", "pause", "resume", "purge"},
		RunE: func(cmd *cobra.Command, args []string) error {
			req := admin.BulkRequest{Action: args[0], DryRun: dryRun, Filter: admin.BulkFilter{
				Status: f.status, Service: f.service, Handler: f.handler, Key: f.key, ObjectKey: f.objectKey,
				CreatedAfter: f.after, CreatedBefore: f.before,
			}}
			var a admin.BulkAnswer
			if err := client().do(cmd.Context(), "POST", "/invocations/bulk", req, &a); err != nil {
				return fmt.Errorf("bulk %s: %w", args[0], err)
			}
			if dryRun {
				if *asJSON {
					return printJSON(env.stdout, a)
				}
				fmt.Fprintf(env.stdout, "dry run: %s would apply to %d invocations\n", args[0], a.Matched)
				return nil
			}
			if !*asJSON {
				fmt.Fprintf(env.stdout, "operation %s: %s of %d invocations\n", a.Operation, args[0], a.Matched)
			}
			t := time.NewTicker(poll)
			defer t.Stop()
			for {
				var op admin.OperationView
				if err := client().do(cmd.Context(), "GET", "/operations/"+url.PathEscape(a.Operation), nil, &op); err != nil {
					return fmt.Errorf("operation %s: %w", a.Operation, err)
				}
				if op.Done {
					if *asJSON {
						return printJSON(env.stdout, op)
					}
					fmt.Fprintf(env.stdout, "done: %s applied to %d invocations\n", args[0], op.Applied)
					return nil
				}
				if !*asJSON {
					fmt.Fprintf(env.stdout, "  %d of %d (%d listed entries walked)\n", op.Applied, a.Matched, op.Scanned)
				}
				select {
				case <-cmd.Context().Done():
					return fmt.Errorf("operation %s goes on in the cluster: %w", a.Operation, cmd.Context().Err())
				case <-t.C:
				}
			}
		},
	}
	fl := bulk.Flags()
	fl.StringVar(&f.status, "status", "", "pending, running, queued, scheduled, paused, completed or failed")
	fl.StringVar(&f.service, "service", "", "only this service")
	fl.StringVar(&f.handler, "handler", "", "only this handler")
	fl.StringVar(&f.key, "key", "", "only this idempotency key")
	fl.StringVar(&f.objectKey, "object-key", "", "only this object key or workflow id")
	fl.StringVar(&f.before, "created-before", "", "only those created before this RFC 3339 time")
	fl.StringVar(&f.after, "created-after", "", "only those created at or after this RFC 3339 time")
	fl.BoolVar(&dryRun, "dry-run", false, "only count the invocations it would apply to")
	fl.DurationVar(&poll, "poll", 500*time.Millisecond, "how often to print progress")
	return []*cobra.Command{resume, restart, kill, purge, bulk}
}
