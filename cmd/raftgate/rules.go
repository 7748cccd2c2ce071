package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

func newRulesCmd(env cliEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "manage scope rules: per-scope concurrency limits (set, list, enable, disable, delete)",
		Long: `A scope rule limits the invocations sent in a scope (POST /restate/scope/{scope}/…).
PATTERN is a scope, or "*" for every scope; a scope's own rule wins over "*".
Every change names the version it replaces: set, enable and disable read the
rule first (or take --expected-version), and a change made meanwhile by
someone else is refused rather than overwritten.`,
	}
	client := addAdminFlags(cmd)
	path := func(pattern string) string { return "/rules/" + url.PathEscape(pattern) }

	// change reads the rule, lets edit adjust it, and writes it back at
	// the version read (or at expected, when given).
	change := func(cmd *cobra.Command, pattern string, expected int64, edit func(cur *admin.RuleView, req *admin.RuleRequest) error) error {
		var req admin.RuleRequest
		cur := admin.RuleView{Pattern: pattern, Enabled: true}
		if expected >= 0 {
			req.ExpectedVersion = uint64(expected)
		}
		err := client().do(cmd.Context(), "GET", path(pattern), nil, &cur)
		var ae *apiError
		switch {
		case err == nil:
			if expected < 0 {
				req.ExpectedVersion = cur.Version
			}
		case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		default:
			return err
		}
		if err := edit(&cur, &req); err != nil {
			return err
		}
		var v admin.RuleView
		if err := client().do(cmd.Context(), "PUT", path(pattern), req, &v); err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "rule %s: concurrency %d, %s, version %d\n", v.Pattern, v.Concurrency, enabledText(v.Enabled), v.Version)
		return nil
	}

	var concurrency uint32
	var setExpected int64
	set := &cobra.Command{
		Use:   "set PATTERN --concurrency N",
		Short: "create or change a scope rule",
		Example: `  raftgate rules set checkout --concurrency 50
  raftgate rules set '*' --concurrency 200`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := change(cmd, args[0], setExpected, func(cur *admin.RuleView, req *admin.RuleRequest) error {
				req.Concurrency = concurrency
				req.Enabled = &cur.Enabled
				return nil
			})
			if err != nil {
				return fmt.Errorf("set rule %s: %w", args[0], err)
			}
			return nil
		},
	}
	set.Flags().Uint32Var(&concurrency, "concurrency", 0, "invocations of the scope in flight at once, cluster-wide")
	set.Flags().Int64Var(&setExpected, "expected-version", -1, "the rule's version this change replaces (0: create); default: the version read just before")
	_ = set.MarkFlagRequired("concurrency")

	toggle := func(use string, enabled bool) *cobra.Command {
		var expected int64
		c := &cobra.Command{
			Use:   use + " PATTERN",
			Short: use + " a scope rule",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				err := change(cmd, args[0], expected, func(cur *admin.RuleView, req *admin.RuleRequest) error {
					if cur.Version == 0 {
						return fmt.Errorf("no rule for %q (raftgate rules list shows the rules)", args[0])
					}
					req.Concurrency = cur.Concurrency
					req.Enabled = &enabled
					return nil
				})
				if err != nil {
					return fmt.Errorf("%s rule %s: %w", use, args[0], err)
				}
				return nil
			},
		}
		c.Flags().Int64Var(&expected, "expected-version", -1, "the rule's version this change replaces; default: the version read just before")
		return c
	}

	var asJSON bool
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "list scope rules",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var l admin.RuleList
			if err := client().do(cmd.Context(), "GET", "/rules", nil, &l); err != nil {
				return fmt.Errorf("list rules: %w", err)
			}
			if asJSON {
				return printJSON(env.stdout, l)
			}
			if len(l.Rules) == 0 {
				fmt.Fprintln(env.stdout, "no rules (add one with: raftgate rules set SCOPE --concurrency N)")
				return nil
			}
			tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "PATTERN\tCONCURRENCY\tSTATE\tVERSION\tUPDATED\n")
			for _, v := range l.Rules {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", v.Pattern, v.Concurrency, enabledText(v.Enabled), v.Version, dash(v.UpdatedAt))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var delExpected uint64
	del := &cobra.Command{
		Use:     "delete PATTERN",
		Aliases: []string{"rm"},
		Short:   "delete a scope rule",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := path(args[0])
			if delExpected > 0 {
				p += "?expectedVersion=" + strconv.FormatUint(delExpected, 10)
			}
			if err := client().do(cmd.Context(), "DELETE", p, nil, nil); err != nil {
				return fmt.Errorf("delete rule %s: %w", args[0], err)
			}
			fmt.Fprintf(env.stdout, "rule %s deleted\n", args[0])
			return nil
		},
	}
	del.Flags().Uint64Var(&delExpected, "expected-version", 0, "delete only if the rule is still at this version")

	cmd.AddCommand(set, list, toggle("enable", true), toggle("disable", false), del)
	return cmd
}

func enabledText(enabled bool) string {
	if enabled {
		return "enabled"
	}
	return "disabled"
}
