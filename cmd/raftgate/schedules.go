package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

func newSchedulesCmd(env cliEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "manage schedules: recurring invocations (add, list, show, pause, resume, trigger, backfill, rm)",
	}
	client := addAdminFlags(cmd)

	var req admin.ScheduleRequest
	add := &cobra.Command{
		Use:   "add ID TARGET [BODY]",
		Short: "create or replace a schedule of TARGET: Service/handler, or Object/key/handler ({tick} in the key: the tick's time)",
		Example: `  raftgate schedules add nightly Billing/close --cron "0 2 * * *" --tz Europe/Paris
  raftgate schedules add poll Feeds/refresh '{"all":true}' --every 5m --overlap buffer-one
  raftgate schedules add hourly Report/run --every R24/2026-12-01T00:00:00Z/PT1H
  raftgate schedules add reset Counter/nightly/reset --cron @daily
  raftgate schedules add signups Signup/{tick}/run --every 1h    # one workflow per tick
  raftgate schedules add december Promo/send --cron "0 9 * * *" --start 2026-12-01T00:00:00Z --end 2026-12-24T23:59:59Z`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := req
			r.Target = args[1]
			if len(args) == 3 {
				if !json.Valid([]byte(args[2])) {
					return fmt.Errorf("add schedule %s: BODY must be JSON", args[0])
				}
				r.Body = json.RawMessage(args[2])
			}
			var v admin.ScheduleView
			if err := client().do(cmd.Context(), "PUT", "/schedules/"+url.PathEscape(args[0]), r, &v); err != nil {
				return fmt.Errorf("add schedule %s: %w", args[0], err)
			}
			fmt.Fprintf(env.stdout, "schedule %s: %s %s, next run %s\n", v.ID, v.Target, specText(v), dash(v.NextRun))
			return nil
		},
	}
	add.Flags().StringVar(&req.Every, "every", "", "run at this interval: a Go duration like 5m or R/PT5M (ticks aligned to the epoch), or R[n]/START/DURATION (n ticks from START)")
	add.Flags().StringVar(&req.Cron, "cron", "", `run at the times of a cron expression, like "0 2 * * *"`)
	add.Flags().StringVar(&req.TimeZone, "tz", "", "time zone of --cron, like Europe/Paris (default UTC)")
	add.Flags().StringVar(&req.Overlap, "overlap", "", "when the previous run has not completed: skip (default), buffer-one or allow-all (a keyed target's is allow-all: its runs wait in the key's queue)")
	add.Flags().StringVar(&req.CatchupWindow, "catchup-window", "", "after downtime, run missed ticks at most this old; older ones are skipped (default 1h)")
	add.Flags().StringVar(&req.Jitter, "jitter", "", "delay each tick by up to this much, like 10s")
	add.Flags().BoolVar(&req.Paused, "paused", false, "create it paused")
	add.Flags().StringVar(&req.Start, "start", "", "no tick before this time (RFC 3339, like 2026-12-01T00:00:00Z)")
	add.Flags().StringVar(&req.End, "end", "", "no tick after this time (RFC 3339); then the schedule has ended")
	add.MarkFlagsOneRequired("every", "cron")
	add.MarkFlagsMutuallyExclusive("every", "cron")

	var asJSON bool
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "list schedules",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var l admin.ScheduleList
			if err := client().do(cmd.Context(), "GET", "/schedules", nil, &l); err != nil {
				return fmt.Errorf("list schedules: %w", err)
			}
			if asJSON {
				return printJSON(env.stdout, l)
			}
			if len(l.Schedules) == 0 {
				fmt.Fprintln(env.stdout, "no schedules (add one with: raftgate schedules add ID SERVICE/HANDLER --every 5m)")
				return nil
			}
			tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "ID\tTARGET\tSPEC\tOVERLAP\tSTATE\tNEXT RUN\tLAST RUN\tRUNS\tSKIPPED\n")
			for _, v := range l.Schedules {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", v.ID, v.Target, specText(v), v.Overlap, stateText(v),
					dash(v.NextRun), dash(v.LastRun), v.Runs, v.Skipped)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the admin API's JSON answer")

	show := &cobra.Command{
		Use:   "show ID",
		Short: "show a schedule as JSON (its spec, next and last runs, skipped ticks)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var v admin.ScheduleView
			if err := client().do(cmd.Context(), "GET", "/schedules/"+url.PathEscape(args[0]), nil, &v); err != nil {
				return fmt.Errorf("show schedule %s: %w", args[0], err)
			}
			return printJSON(env.stdout, v)
		},
	}

	action := func(name, short string) *cobra.Command {
		return &cobra.Command{
			Use:   name + " ID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var v admin.ScheduleView
				if err := client().do(cmd.Context(), "POST", "/schedules/"+url.PathEscape(args[0])+"/"+name, nil, &v); err != nil {
					return fmt.Errorf("%s schedule %s: %w", name, args[0], err)
				}
				if v.TriggeredInvocationID != "" {
					fmt.Fprintf(env.stdout, "triggered %s: %s\n", v.ID, v.TriggeredInvocationID)
					return nil
				}
				fmt.Fprintf(env.stdout, "%s: %s, next run %s\n", v.ID, stateText(v), dash(v.NextRun))
				return nil
			},
		}
	}

	var bf admin.BackfillRequest
	backfill := &cobra.Command{
		Use:     "backfill ID --from TIME --to TIME",
		Short:   "run each tick of a past time range once (ticks that ran already are not run again)",
		Example: `  raftgate schedules backfill nightly --from 2026-11-01T00:00:00Z --to 2026-11-30T23:59:59Z`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var v admin.ScheduleView
			if err := client().do(cmd.Context(), "POST", "/schedules/"+url.PathEscape(args[0])+"/backfill", bf, &v); err != nil {
				return fmt.Errorf("backfill schedule %s: %w", args[0], err)
			}
			if v.Backfill == nil {
				return fmt.Errorf("backfill schedule %s: the answer says nothing of the backfill", args[0])
			}
			fmt.Fprintf(env.stdout, "backfilled %s: %d ticks, %d runs started (%d had run already)\n",
				v.ID, v.Backfill.Ticks, v.Backfill.Started, v.Backfill.Ticks-v.Backfill.Started)
			return nil
		},
	}
	backfill.Flags().StringVar(&bf.From, "from", "", "first time of the range (RFC 3339), included")
	backfill.Flags().StringVar(&bf.To, "to", "", "last time of the range (RFC 3339), included; not in the future")
	_ = backfill.MarkFlagRequired("from")
	_ = backfill.MarkFlagRequired("to")

	rm := &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"remove"},
		Short:   "delete a schedule (a run under way continues)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := client().do(cmd.Context(), "DELETE", "/schedules/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return fmt.Errorf("remove schedule %s: %w", args[0], err)
			}
			fmt.Fprintf(env.stdout, "removed %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(add, list, show,
		action("pause", "pause a schedule: no tick runs until resumed"),
		action("resume", "resume a paused schedule from its next tick (ticks while paused are not run)"),
		action("trigger", "run a schedule once now, whatever its spec and overlap policy"),
		backfill, rm)
	return cmd
}

func specText(v admin.ScheduleView) string {
	if v.Every != "" {
		return "every " + v.Every
	}
	if v.TimeZone != "" {
		return fmt.Sprintf("cron %q %s", v.Cron, v.TimeZone)
	}
	return fmt.Sprintf("cron %q", v.Cron)
}

func stateText(v admin.ScheduleView) string {
	switch {
	case v.Paused:
		return "paused"
	case v.Ended:
		return "ended"
	}
	return "active"
}
