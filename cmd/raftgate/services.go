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
	add := &cobra.Command{
		Use:   "add NAME URL",
		Short: "register or update a service at its base URL",
		Example: `  raftgate services add Greeter http://127.0.0.1:9080 --handlers greet
    # raftgate then calls POST http://127.0.0.1:9080/Greeter/greet
  raftgate services add Counter http://127.0.0.1:9080 --kind object --shared get
    # POST /Counter/{key}/add runs one at a time per key; get runs alongside`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := admin.ServiceRequest{URL: args[1], Handlers: handlers, Kind: kind, Shared: shared}
			var v admin.ServiceView
			if err := client().do(cmd.Context(), "PUT", "/services/"+url.PathEscape(args[0]), req, &v); err != nil {
				return fmt.Errorf("add service %s: %w", args[0], err)
			}
			fmt.Fprintf(env.stdout, "registered %s at %s (handlers: %s)\n", v.Name, v.URL, handlerText(v.Handlers))
			return nil
		},
	}
	add.Flags().StringSliceVar(&handlers, "handlers", nil, "accept only these handlers, comma-separated (default: any)")
	add.Flags().StringVar(&kind, "kind", "service", "service, object (handlers addressed by a key, one exclusive call per key at a time) or workflow (run once per id)")
	add.Flags().StringSliceVar(&shared, "shared", nil, "handlers of an object or workflow that do not wait for the key, comma-separated")

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
			if len(l.Services) == 0 {
				fmt.Fprintln(env.stdout, "no services registered (add one with: raftgate services add NAME URL)")
				return nil
			}
			tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "NAME\tURL\tHANDLERS\tUPDATED\n")
			for _, s := range l.Services {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.URL, handlerText(s.Handlers), dash(s.UpdatedAt))
			}
			return tw.Flush()
		},
	}

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
