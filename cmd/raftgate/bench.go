package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newBenchCmd(env cliEnv) *cobra.Command {
	o := benchOptions{}
	var (
		service string
		asJSON  bool
		quiet   bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "generate load against one or more ingresses and report latency and throughput",
		Long: `bench drives any ingress with raftgate's (Restate-compatible) HTTP API.
Closed loop (default): --concurrency clients, each sending its next request
when the previous one answered. Open loop (--rate R): R operations per second
on a fixed schedule, at most --concurrency in flight, latency measured from
each operation's scheduled start. Latency percentiles are over successful
operations; errors are counted by HTTP status.`,
		Example: `  raftgate bench --mode call --concurrency 32 --duration 30s
  raftgate bench --ingress http://127.0.0.1:8080,http://127.0.0.1:8180 --mode send --rate 2000 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ok bool
			if o.Service, o.Handler, ok = strings.Cut(service, "/"); !ok {
				return fmt.Errorf("--service: %q: want SERVICE/HANDLER", service)
			}
			if !quiet {
				o.Progress = env.stderr
				o.ProgressTTY = isTerminal(env.stderr)
			}
			r, err := runBench(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(env.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				printReport(env.stdout, r)
			}
			if r.Successes == 0 {
				return fmt.Errorf("bench: no operation succeeded (%d errors)", r.Errors)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Targets, "ingress", []string{defaultIngressURL}, "ingress base URLs, comma-separated (round-robin)")
	f.StringVar(&o.Mode, "mode", modeCall, "send, call or send+attach")
	f.IntVar(&o.Concurrency, "concurrency", 16, "clients (closed loop) or cap on operations in flight (open loop)")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "measured duration")
	f.DurationVar(&o.Warmup, "warmup", time.Second, "unmeasured load before --duration")
	f.IntVar(&o.Requests, "requests", 0, "stop after this many measured operations (0: run for --duration)")
	f.Float64Var(&o.Rate, "rate", 0, "open loop: operations per second (0: closed loop)")
	f.StringVar(&service, "service", greeterName+"/greet", "SERVICE/HANDLER to invoke")
	f.IntVar(&o.PayloadBytes, "payload-bytes", 16, "request body size (a JSON string)")
	f.DurationVar(&o.Delay, "delay", 0, "with send modes: ?delay= for each send")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Second, "timeout of one HTTP request")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&quiet, "quiet", false, "no progress display on stderr")
	return cmd
}

// isTerminal reports whether w is a terminal, where the progress line is
// rewritten in place rather than printed once a second.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
