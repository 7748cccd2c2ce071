package main

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

func newServicesCmd(env cliEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "services",
		Short: "manage the service registry (add, list, show, rm)",
	}
	client := addAdminFlags(cmd)

	var handlers, shared []string
	var kind string
	var retry retryFlags
	var limits admin.LimitsView
	var perKey uint32
	var callbackURL string
	add := &cobra.Command{
		Use:   "add NAME URL",
		Short: "register or update a service at its base URL",
		Example: `  raftgate services add Greeter http://127.0.0.1:9080 --handlers greet
    # raftgate then calls POST http://127.0.0.1:9080/Greeter/greet
  raftgate services add Counter http://127.0.0.1:9080 --kind object --shared get
    # POST /Counter/{key}/add runs one at a time per key; get runs alongside
  raftgate services add Billing http://127.0.0.1:9080 --callback-url https://hooks.example.com/billing
    # each completed invocation's result is POSTed there (the origin must be in --callback-allow)`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := admin.ServiceRequest{URL: args[1], Handlers: handlers, Kind: kind, Shared: shared, Retry: retry.request(cmd),
				PerKeyConcurrency: perKey, CallbackURL: callbackURL}
			if limits != (admin.LimitsView{}) {
				req.Limits = &limits
			}
			var v admin.ServiceView
			if err := client().do(cmd.Context(), "PUT", "/services/"+url.PathEscape(args[0]), req, &v); err != nil {
				return fmt.Errorf("add service %s: %w", args[0], err)
			}
			fmt.Fprintf(env.stdout, "registered %s at %s (handlers: %s), retry %s\n", v.Name, v.URL, handlerText(v.Handlers), retryText(v.Retry))
			return nil
		},
	}
	add.Flags().StringSliceVar(&handlers, "handlers", nil, "accept only these handlers, comma-separated (default: any)")
	add.Flags().StringVar(&kind, "kind", "service", "service, object (handlers addressed by a key, one exclusive call per key at a time) or workflow (run once per id)")
	add.Flags().StringSliceVar(&shared, "shared", nil, "handlers of an object or workflow that do not wait for the key, comma-separated")
	add.Flags().Uint32Var(&retry.maxAttempts, "max-attempts", 0, "deliveries tried before a transient failure is the result (default: the cluster's)")
	add.Flags().StringVar(&retry.initialBackoff, "initial-backoff", "", "delay after a first failed delivery, like 500ms (default: the cluster's)")
	add.Flags().StringVar(&retry.maxBackoff, "max-backoff", "", "longest delay between deliveries, like 1m (default: the cluster's)")
	add.Flags().StringVar(&retry.attemptTimeout, "attempt-timeout", "", "bound of one delivery, like 10s (default: the cluster's)")
	add.Flags().Uint32Var(&limits.Concurrency, "concurrency", 0, "deliveries in flight at once, cluster-wide")
	add.Flags().Float64Var(&limits.RatePerSecond, "rate", 0, "deliveries started per second, cluster-wide")
	add.Flags().Uint32Var(&limits.Burst, "burst", 0, "the rate's token bucket size")
	add.Flags().StringVar(&callbackURL, "callback-url", "", "POST each invocation's result here when it completes, unless its send names another (x-raftgate-callback); the origin must be in the cluster's --callback-allow")
	add.Flags().Uint32Var(&perKey, "per-key-concurrency", 0, "in flight per key of an object's or workflow's shared handlers")

	var asJSON bool
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "list registered services",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var l admin.ServiceList
			if err := client().do(cmd.Context(), "GET", "/services", nil, &l); err != nil {
				return fmt.Errorf("list services: %w", err)
			}
			if asJSON {
				return printJSON(env.stdout, l)
			}
			if len(l.Services) == 0 {
				fmt.Fprintln(env.stdout, "no services registered (add one with: raftgate services add NAME URL)")
				return nil
			}
			tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "NAME\tKIND\tURL\tHANDLERS\tSHARED\tRETRY\tUPDATED\n")
			for _, s := range l.Services {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, dash(s.Kind), s.URL, handlerText(s.Handlers),
					dash(strings.Join(s.Shared, ",")), retryText(s.Retry), dash(s.UpdatedAt))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the admin API's JSON answer")

	var showJSON bool
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "show one service's registration (kind, handlers, retry, limits) and its backlog",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var v admin.ServiceView
			if err := client().do(cmd.Context(), "GET", "/services/"+url.PathEscape(args[0]), nil, &v); err != nil {
				return fmt.Errorf("show service %s: %w", args[0], err)
			}
			if showJSON {
				return printJSON(env.stdout, v)
			}
			tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "name\t%s\nkind\t%s\nurl\t%s\nhandlers\t%s\nshared\t%s\nretry\t%s\nlimits\t%s\nper-key concurrency\t%s\ncallback url\t%s\n",
				v.Name, dash(v.Kind), v.URL, handlerText(v.Handlers), dash(strings.Join(v.Shared, ",")), retryText(v.Retry),
				limitsText(v.Limits), countText(v.PerKeyConcurrency), dash(v.CallbackURL))
			names := make([]string, 0, len(v.HandlerConfig))
			for name := range v.HandlerConfig {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				hc := v.HandlerConfig[name]
				line := fmt.Sprintf("limits %s, retry %s", limitsText(hc.Limits), retryText(hc.Retry))
				fmt.Fprintf(tw, "handler %s\t%s\n", name, line)
			}
			fmt.Fprintf(tw, "updated\t%s\n", dash(v.UpdatedAt))
			if v.BacklogError != "" {
				fmt.Fprintf(tw, "backlog\tunavailable: %s\n", v.BacklogError)
			}
			if b := v.Backlog; b != nil {
				fmt.Fprintf(tw, "in flight\t%d\nwaiting for limit\t%d\nwaiting for retry\t%d\npaused\t%d\noldest waiting\t%s\n",
					b.InFlight, b.WaitingForLimit, b.WaitingForRetry, b.Paused, b.OldestWaitingAge)
				if b.Truncated {
					fmt.Fprintln(tw, "(backlog counts stopped at their bound: lower bounds)")
				}
			}
			return tw.Flush()
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print the admin API's JSON answer")

	rm := &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "remove a service",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := client().do(cmd.Context(), "DELETE", "/services/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return fmt.Errorf("remove service %s: %w", args[0], err)
			}
			fmt.Fprintf(env.stdout, "removed %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(add, list, show, rm)
	return cmd
}

func handlerText(hs []string) string {
	if len(hs) == 0 {
		return "any"
	}
	return strings.Join(hs, ",")
}

// retryFlags are the retry policy flags of `services add`.
type retryFlags struct {
	maxAttempts                                uint32
	initialBackoff, maxBackoff, attemptTimeout string
}

// request is the "retry" object of the registration, nil when no flag was
// given (the cluster's defaults apply).
func (f retryFlags) request(cmd *cobra.Command) *admin.RetryRequest {
	var r admin.RetryRequest
	set := false
	if cmd.Flags().Changed("max-attempts") {
		n := f.maxAttempts
		r.MaxAttempts, set = &n, true
	}
	for _, v := range []struct {
		value string
		dst   *string
	}{{f.initialBackoff, &r.InitialBackoff}, {f.maxBackoff, &r.MaxBackoff}, {f.attemptTimeout, &r.AttemptTimeout}} {
		if v.value != "" {
			*v.dst, set = v.value, true
		}
	}
	if !set {
		return nil
	}
	return &r
}

// retryText prints a policy in force: "10x 100ms..30s, 30s each".
func retryText(r admin.RetryView) string {
	if r.MaxAttempts == 0 {
		return "-"
	}
	return fmt.Sprintf("%dx %s..%s, %s each", r.MaxAttempts, r.InitialBackoff, r.MaxBackoff, r.AttemptTimeout)
}

// limitsText prints limits: "3 in flight, 50/s (burst 10)", or "none".
func limitsText(l *admin.LimitsView) string {
	if l == nil {
		return "none"
	}
	var parts []string
	if l.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d in flight", l.Concurrency))
	}
	if l.RatePerSecond > 0 {
		r := strconv.FormatFloat(l.RatePerSecond, 'f', -1, 64) + "/s"
		if l.Burst > 0 {
			r += fmt.Sprintf(" (burst %d)", l.Burst)
		}
		parts = append(parts, r)
	}
	return strings.Join(parts, ", ")
}

func countText(n uint32) string {
	if n == 0 {
		return "none"
	}
	return strconv.FormatUint(uint64(n), 10)
}
