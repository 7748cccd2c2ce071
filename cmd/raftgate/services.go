package main

import (
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

func newServicesCmd(env cliEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "services",
		Short: "manage the service registry (add, list, rm)",
	}
	client := addAdminFlags(cmd)

	var handlers, shared []string
	var kind string
	var retry retryFlags
	add := &cobra.Command{
		Use:   "add NAME URL",
		Short: "register or update a service at its base URL",
		Example: `  raftgate services add Greeter http://127.0.0.1:9080 --handlers greet
    # raftgate then calls POST http://127.0.0.1:9080/Greeter/greet
  raftgate services add Counter http://127.0.0.1:9080 --kind object --shared get
    # POST /Counter/{key}/add runs one at a time per key; get runs alongside`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := admin.ServiceRequest{URL: args[1], Handlers: handlers, Kind: kind, Shared: shared, Retry: retry.request(cmd)}
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
	cmd.AddCommand(add, list, rm)
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
