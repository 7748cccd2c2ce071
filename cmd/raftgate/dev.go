package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/server"
)

// devPortStep separates the ports of dev nodes: node 2 listens on the
// defaults + 100, node 3 on + 200.
const devPortStep = 100

// devReadyTimeout bounds the wait for the dev cluster to elect leaders.
const devReadyTimeout = 2 * time.Minute

// devAddrs are node 1's listen addresses in dev; node i+1 uses each port
// plus devPortStep·i.
type devAddrs struct {
	ingress, admin, node, gossip string
}

func defaultDevAddrs() devAddrs {
	return devAddrs{ingress: server.DefaultIngressAddr, admin: server.DefaultAdminAddr, node: server.DefaultNodeAddr, gossip: server.DefaultGossipAddr}
}

// shiftPort adds by to addr's port; an address it cannot parse is left for
// Validate to name.
func shiftPort(addr string, by int) string {
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil || by == 0 {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(p+by))
}

// devConfigs returns the configs of a local n-node cluster with data under
// dataDir/node-<id>.
func devConfigs(n int, dataDir string, base devAddrs) []ServerConfig {
	shift := func(addr string, i int) string { return shiftPort(addr, devPortStep*i) }
	cluster := make(map[uint64]string, n)
	for i := range n {
		cluster[uint64(i+1)] = shift(base.node, i)
	}
	cfgs := make([]ServerConfig, n)
	for i := range n {
		c := DefaultServerConfig()
		c.NodeID = uint64(i + 1)
		c.DataDir = filepath.Join(dataDir, fmt.Sprintf("node-%d", i+1))
		c.IngressAddr = shift(base.ingress, i)
		c.AdminAddr = shift(base.admin, i)
		c.NodeAddr = shift(base.node, i)
		c.GossipAddr = shift(base.gossip, i)
		c.InitialCluster = maps.Clone(cluster)
		c.Join = nil
		for j := range n {
			if j != i {
				c.Join = append(c.Join, shift(base.gossip, j))
			}
		}
		c.LogFormat = "console"
		c.OpenIngressExpected = true // a laptop's cluster: no token warning
		cfgs[i] = c
	}
	return cfgs
}

func newDevCmd(env cliEnv, runNode serverRunner) *cobra.Command {
	var (
		dataDir  string
		nodes    int
		logLevel string
		addrs    = defaultDevAddrs()
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "run a local cluster with example services and print commands to try",
		Long: `dev starts a 1- or 3-node cluster on the default ports (node 2 and 3 at +100
and +200; move them with --ingress-addr, --admin-addr, --node-addr and
--gossip-addr, node 1's addresses), example services (the service Greeter,
the virtual object Counter, the workflow Signup), registers them, and
prints commands to try. Data lives under --data-dir, or a
temporary directory that is removed on exit. The raft library's own
messages (elections, votes) show at --log-level debug.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if nodes != 1 && nodes != 3 {
				return fmt.Errorf("--nodes: %d: want 1 or 3", nodes)
			}
			logger, err := newLogger(env.stderr, "console", logLevel)
			if err != nil {
				return err
			}
			warnUnknownEnv(cmd, env, logger)
			dir := dataDir
			if dir == "" {
				if dir, err = os.MkdirTemp("", "raftgate-dev-*"); err != nil {
					return fmt.Errorf("dev: temp data dir: %w", err)
				}
				defer func() {
					if err := os.RemoveAll(dir); err != nil {
						logger.Warn().Err(err).Str("dir", dir).Msg("removing dev data dir")
					}
				}()
			}
			cfgs := devConfigs(nodes, dir, addrs)
			for i := range cfgs {
				cfgs[i].LogLevel = logLevel
				// Raft's own elections and votes are for debugging.
				cfgs[i].QuietRaft = logger.GetLevel() > zerolog.DebugLevel
				if err := cfgs[i].Validate(); err != nil {
					return err
				}
			}
			exe, _ := os.Executable()
			return runDev(cmd.Context(), env.stdout, logger, cfgs, devHelp{cli: devCLI(os.Args[0], exe), tempDir: dataDir == ""}, runNode)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep data here (default: a temp dir removed on exit)")
	cmd.Flags().IntVar(&nodes, "nodes", 1, "cluster size: 1 or 3")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: trace, debug, info, warn or error")
	cmd.Flags().StringVar(&addrs.ingress, "ingress-addr", addrs.ingress, "node 1's ingress address (node 2 and 3: port +100, +200)")
	cmd.Flags().StringVar(&addrs.admin, "admin-addr", addrs.admin, "node 1's admin address")
	cmd.Flags().StringVar(&addrs.node, "node-addr", addrs.node, "node 1's node-to-node gRPC address")
	cmd.Flags().StringVar(&addrs.gossip, "gossip-addr", addrs.gossip, "node 1's gossip address")
	return cmd
}

// devHelp is what the help text needs besides the configs.
type devHelp struct {
	cli     string // how to run this program (devCLI)
	tempDir bool   // the data dir is removed on exit
}

// runDev runs the nodes and the example service until ctx ends or a node
// stops, and registers the service once the cluster is ready.
func runDev(ctx context.Context, out io.Writer, logger zerolog.Logger, cfgs []ServerConfig, help devHelp, runNode serverRunner) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel (deferred later, runs first)
	defer cancel()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("dev: example service: %w", err)
	}
	examples := http.NewServeMux()
	examples.Handle("/"+greeterName+"/", newGreeter(logger.With().Str("component", "greeter").Logger()))
	newKeyedExamples(examples)
	greeter := &http.Server{Handler: examples, ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() { _ = greeter.Serve(ln) }) // returns on Shutdown
	defer func() {
		shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		_ = greeter.Shutdown(shutdownCtx)
	}()
	examplesURL := "http://" + ln.Addr().String()

	nodeDone := make(chan error, len(cfgs))
	for _, cfg := range cfgs {
		nodeLog := logger.With().Uint64("node", cfg.NodeID).Logger()
		wg.Go(func() {
			err := runNode(ctx, cfg, nodeLog)
			if err == nil && ctx.Err() == nil {
				err = errors.New("stopped on its own")
			}
			if err != nil {
				err = fmt.Errorf("node %d: %w", cfg.NodeID, err)
			}
			nodeDone <- err
		})
	}

	registered := make(chan error, 1)
	wg.Go(func() {
		c := &adminClient{base: "http://" + cfgs[0].AdminAddr, http: &http.Client{Timeout: 5 * time.Second}}
		registered <- registerWhenReady(ctx, c, examplesURL, devReadyTimeout, 100*time.Millisecond)
	})

	for {
		select {
		case <-ctx.Done():
			logger.Info().Msg("stopping dev cluster")
			return nil
		case err := <-nodeDone:
			if err != nil {
				return err
			}
		case err := <-registered:
			if err != nil {
				return fmt.Errorf("dev: registering the example service: %w", err)
			}
			printDevHelp(out, help.cli, cfgs, examplesURL, help.tempDir)
		}
	}
}

// devServices are the example services dev registers.
var devServices = append([]exampleService{{name: greeterName, kind: "service", handlers: []string{"greet"}}}, keyedExamples...)

// registerWhenReady waits until the admin API reports ready, then registers
// the example services, retrying what is retryable, within timeout.
func registerWhenReady(ctx context.Context, c *adminClient, url string, timeout, poll time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	registered := 0
	var lastErr error
	for {
		if lastErr = c.do(ctx, "GET", "/readyz", nil, nil); lastErr == nil {
			for ; registered < len(devServices); registered++ {
				svc := devServices[registered]
				req := admin.ServiceRequest{URL: url, Kind: svc.kind, Handlers: svc.handlers, Shared: svc.shared}
				if lastErr = c.do(ctx, "PUT", "/services/"+svc.name, req, nil); lastErr != nil {
					break
				}
			}
			if lastErr == nil {
				return nil
			}
			var apiErr *apiError
			if errors.As(lastErr, &apiErr) && apiErr.Status != http.StatusServiceUnavailable && apiErr.Status != http.StatusTooManyRequests {
				return lastErr
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("cluster not ready after %v: %w", timeout, lastErr)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// devCLI is how the help text names this program so that its commands
// work when pasted: `go run` builds into a temporary directory that is
// gone afterwards, so there it is `go run ./cmd/raftgate` (from the
// module's root); otherwise the path it was started by.
func devCLI(arg0, executable string) string {
	if strings.Contains(executable, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/raftgate"
	}
	return arg0
}

func printDevHelp(out io.Writer, cli string, cfgs []ServerConfig, examplesURL string, tempDir bool) {
	ingress := "http://" + cfgs[0].IngressAddr
	data := filepath.Dir(cfgs[0].DataDir)
	if tempDir {
		data += " (removed on exit)"
	}
	fmt.Fprintf(out, `
raftgate dev: %d node(s) up, data in %s
Example services %s at %s, registered.

Try:
  # call and wait for the result
  curl -s %[5]s/Greeter/greet -H 'content-type: application/json' -d '"Ada"'
  # send without waiting: answers the invocation id (kept in ID here)
  ID=$(curl -s %[5]s/Greeter/greet/send -H 'content-type: application/json' -d '"Ada"' | sed 's/.*"invocationId":"\([^"]*\)".*/\1/')
  # attach to it (long-poll) or read its output (470 while not ready)
  curl -s "%[5]s/restate/invocation/$ID/attach"
  curl -s "%[5]s/restate/invocation/$ID/output"
  # an idempotency key de-duplicates: run it twice, get one invocation
  curl -s %[5]s/Greeter/greet -H 'idempotency-key: order-42' -H 'content-type: application/json' -d '"Ada"'
  curl -s %[5]s/restate/invocation/Greeter/greet/order-42/output
  # run no earlier than in 10 seconds
  curl -s '%[5]s/Greeter/greet/send?delay=10s' -H 'content-type: application/json' -d '"Ada"'
  # a virtual object: the calls of one key (alice) run one at a time, in order
  curl -s %[5]s/Counter/alice/add -H 'content-type: application/json' -d '5'
  curl -s %[5]s/Counter/alice/add -H 'content-type: application/json' -d '2'
  curl -s %[5]s/Counter/alice/get -d ''
  # a workflow: run executes once per id (ada); status runs alongside
  curl -s %[5]s/Signup/ada/run/send -H 'content-type: application/json' -d '{"email":"ada@example.com"}'
  curl -s %[5]s/restate/workflow/Signup/ada/attach
  curl -s %[5]s/Signup/ada/status -d ''
  # the cluster and the registry
  %[7]s status --admin http://%[6]s
  %[7]s services list --admin http://%[6]s
`, len(cfgs), data, exampleNames(devServices), examplesURL, ingress, cfgs[0].AdminAddr, cli)
	if len(cfgs) > 1 {
		fmt.Fprintf(out, "  # every node's ingress serves every invocation: also")
		for _, c := range cfgs[1:] {
			fmt.Fprintf(out, " http://%s", c.IngressAddr)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "\nCtrl-C stops the cluster.\n")
}
