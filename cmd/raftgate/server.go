package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/internal/buildinfo"
	"github.com/raftgate/raftgate/server"
)

// ServerConfig is what `raftgate server` runs: the node's config, and the
// format and level of the log the command builds for it.
type ServerConfig struct {
	server.Config
	// LogFormat is json or console (--log-format).
	LogFormat string
	// LogLevel is trace, debug, info, warn or error (--log-level).
	LogLevel string
}

// DefaultServerConfig is server.DefaultConfig with a JSON log at info.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{Config: server.DefaultConfig(), LogFormat: "json", LogLevel: "info"}
}

// Validate checks the node's config and the log's format and level.
func (c ServerConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		return fmt.Errorf("%w: --log-format: %q is not json or console", server.ErrInvalidConfig, c.LogFormat)
	}
	if _, err := zerolog.ParseLevel(c.LogLevel); err != nil || c.LogLevel == "" {
		return fmt.Errorf("%w: --log-level: %q is not one of trace, debug, info, warn, error", server.ErrInvalidConfig, c.LogLevel)
	}
	return nil
}

// runServer runs one raftgate node with cfg until ctx is done, then shuts
// it down within cfg.ShutdownGrace and returns nil; it returns an error if
// the node cannot start or stops by itself. cfg has passed Validate.
func runServer(ctx context.Context, cfg ServerConfig, logger zerolog.Logger) error {
	tuneGC()
	cfg.Logger = logger
	n, err := server.New(cfg.Config)
	if err != nil {
		return err
	}
	if err := n.Start(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return n.Close()
	case err := <-n.Err():
		return errors.Join(err, n.Close())
	}
}

// serverFlags binds the server's flags; the two fields that need parsing
// are kept as text until toConfig.
type serverFlags struct {
	cfg            ServerConfig
	initialCluster string
	gossipKey      string
	configFile     string
	// portOffset shifts the listen addresses left at their defaults.
	portOffset int
	fs         *pflag.FlagSet
}

func newServerFlags(fs *pflag.FlagSet) *serverFlags {
	d := DefaultServerConfig()
	sf := &serverFlags{fs: fs}
	c := &sf.cfg
	fs.Uint64Var(&c.NodeID, "node-id", d.NodeID, "this node's Raft id; must be in --initial-cluster")
	fs.StringVar(&c.DataDir, "data-dir", "", "directory for this node's Raft logs and state (required)")
	fs.StringVar(&c.IngressAddr, "ingress-addr", d.IngressAddr, "listen address of the ingress HTTP API")
	fs.StringVar(&c.AdminAddr, "admin-addr", d.AdminAddr, "listen address of the admin HTTP API")
	fs.StringVar(&c.NodeAddr, "node-addr", d.NodeAddr, "listen address of node-to-node gRPC (Raft and dispatch)")
	fs.StringVar(&c.GossipAddr, "gossip-addr", d.GossipAddr, "listen address of gossip (TCP and UDP)")
	fs.IntVar(&sf.portOffset, "port-offset", 0, "add this to the port of each of --ingress-addr, --admin-addr, --node-addr and --gossip-addr left at its default (several nodes on one machine: 100, 200)")
	fs.StringVar(&c.AdvertiseGossipAddr, "advertise-gossip-addr", "", "gossip address other nodes use, when not --gossip-addr (NAT, proxy)")
	fs.StringVar(&sf.initialCluster, "initial-cluster", server.FormatInitialCluster(d.InitialCluster),
		"every voter as id=host:port, the address the others dial; the same on every node")
	fs.StringSliceVar(&c.Join, "join", nil, "gossip addresses to join, comma-separated; without --node-id and --initial-cluster, an empty data dir joins the cluster there as a new node")
	fs.StringVar(&c.Zone, "zone", "", "this node's zone (failure domain) label")
	fs.Uint64Var(&c.Replace, "replace", 0, "joining only: take over the replicas of node ID (which may be dead) and remove it")
	fs.IntVar(&c.Replication, "replication", d.Replication, "replicas per partition (all nodes while there are fewer), set when the cluster record is created; a node is not removed (without --force) when fewer active nodes would remain")
	fs.DurationVar(&c.DeadNodeTimeout, "dead-node-timeout", d.DeadNodeTimeout, "how long a node may be gone from gossip before its replicas are placed on other nodes")
	fs.Uint32Var(&c.Partitions, "partitions", d.Partitions, "number of partitions, fixed when the cluster is first started")
	fs.DurationVar(&c.Retention, "retention", d.Retention, "how long completed results are kept")
	fs.BoolVar(&c.BalanceLeaders, "balance-leaders", d.BalanceLeaders, "move each partition's leadership to its preferred node when that node is up and replicating (--balance-leaders=false: leave leaders where elections put them)")
	fs.StringVar(&c.Placement, "placement", d.Placement, "where an invocation without an idempotency key or object key goes: local (a partition this node leads, no hop to another node) or spread (any partition)")
	fs.Uint32Var(&c.RetryMaxAttempts, "retry-max-attempts", d.RetryMaxAttempts, "default: deliveries tried before a transient failure pauses the invocation or is recorded as its result (--retry-on-max-attempts; a registration's retry.maxAttempts wins)")
	fs.DurationVar(&c.RetryInitialBackoff, "retry-initial-backoff", d.RetryInitialBackoff, "default: delay after a first failed delivery, doubling up to --retry-max-backoff (with jitter)")
	fs.DurationVar(&c.RetryMaxBackoff, "retry-max-backoff", d.RetryMaxBackoff, "default: longest delay between deliveries")
	fs.DurationVar(&c.RetryAttemptTimeout, "retry-attempt-timeout", d.RetryAttemptTimeout, "default: bound of one delivery (the HTTP call to the service)")
	fs.StringSliceVar(&c.CallbackAllow, "callback-allow", nil, "origins (scheme://host[:port]) completion callbacks may be POSTed to, comma-separated; other x-raftgate-callback URLs get 400 (none allowed when empty)")
	fs.StringVar(&c.CallbackSecret, "callback-secret", "", "secret that signs completion callbacks (x-raftgate-signature: sha256=HMAC of the body); prefer RAFTGATE_CALLBACK_SECRET or the config file to the command line")
	fs.StringVar(&c.RetryOnMaxAttempts, "retry-on-max-attempts", d.RetryOnMaxAttempts, "default: what exhausted deliveries do: pause (keep the invocation for an operator) or fail (record the failure as its result)")
	fs.BoolVar(&c.RejectReusedIdempotencyKeys, "reject-reused-idempotency-keys", d.RejectReusedIdempotencyKeys, "answer 422 to a request whose idempotency key was used with another body, for every service (default: answer the first invocation, as Restate)")
	fs.IntVar(&c.BulkChunk, "bulk-chunk", d.BulkChunk, "invocations one step of a bulk action walks (smaller: shorter pauses for other requests, longer bulk actions)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", d.ShutdownGrace, "bounds the graceful shutdown: in-flight requests may finish until its end")
	fs.DurationVar(&c.DrainDelay, "drain-delay", d.DrainDelay, "on shutdown, keep answering 503 (health included) this long before refusing connections, so a load balancer takes the node out; at most half of --shutdown-grace")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", d.RequestTimeout, "how long the ingress tries to get a request accepted by a partition leader (retries included) before answering 503")
	fs.IntVar(&c.MaxConcurrent, "max-concurrent", d.MaxConcurrent, "ingress concurrency limit; beyond it requests get 429")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", d.MaxBodyBytes, "largest ingress request body; larger ones get 413")
	fs.DurationVar(&c.BodyReadTimeout, "body-read-timeout", d.BodyReadTimeout, "longest time to receive an ingress request body; slower bodies get 408 (they hold no concurrency slot meanwhile)")
	fs.DurationVar(&c.CheckpointInterval, "checkpoint-interval", d.CheckpointInterval, "how often applied state is committed to state.db; off the acknowledgement path, it bounds what a restart replays")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate for node-to-node TLS")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "PEM CA bundle: require and verify peer certificates (mutual TLS)")
	fs.StringVar(&c.IngressTLSCert, "ingress-tls-cert", "", "PEM certificate: serve the ingress over TLS (HTTP/2 and HTTP/1.1)")
	fs.StringVar(&c.IngressTLSKey, "ingress-tls-key", "", "PEM private key for --ingress-tls-cert")
	fs.StringVar(&sf.gossipKey, "gossip-key", "", "base64 key (16, 24 or 32 bytes) encrypting gossip")
	fs.StringVar(&c.AdminToken, "admin-token", "", "bearer token required by the admin API (health probes excepted)")
	fs.StringVar(&c.IngressTokens, "ingress-tokens", "", "TOML file of ingress API tokens and what each may call; re-read on SIGHUP (strongly advised in production)")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve /debug/pprof on the admin address")
	fs.StringVar(&c.LogFormat, "log-format", d.LogFormat, "log format: json or console")
	fs.StringVar(&c.LogLevel, "log-level", d.LogLevel, "log level: trace, debug, info, warn or error")
	fs.StringVar(&sf.configFile, "config", "", "TOML or YAML config file; keys are flag names (flags and env win)")
	return sf
}

// toConfig parses the text-valued flags and validates the result.
func (sf *serverFlags) toConfig() (ServerConfig, error) {
	cfg := sf.cfg
	cfg.Join = append([]string(nil), sf.cfg.Join...)
	ic, err := parseInitialCluster(sf.initialCluster)
	if err != nil {
		return cfg, fmt.Errorf("%w: --initial-cluster: %v", server.ErrInvalidConfig, err)
	}
	cfg.InitialCluster = ic
	if !sf.fs.Changed("node-id") && !sf.fs.Changed("initial-cluster") && (len(cfg.Join) > 0 || joinedBefore(cfg.DataDir)) {
		// Neither names this node: it joins a running cluster (or
		// restarts after it joined one) and the cluster gives its id.
		cfg.NodeID, cfg.InitialCluster = 0, nil
	}
	if sf.portOffset < 0 || sf.portOffset > 60000 {
		return cfg, fmt.Errorf("%w: --port-offset: %d: want 0 to 60000", server.ErrInvalidConfig, sf.portOffset)
	}
	for _, a := range []struct {
		flag string
		addr *string
	}{{"ingress-addr", &cfg.IngressAddr}, {"admin-addr", &cfg.AdminAddr}, {"node-addr", &cfg.NodeAddr}, {"gossip-addr", &cfg.GossipAddr}} {
		if !sf.fs.Changed(a.flag) {
			*a.addr = shiftPort(*a.addr, sf.portOffset)
		}
	}
	if k := strings.TrimSpace(sf.gossipKey); k != "" {
		key, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return cfg, fmt.Errorf("%w: --gossip-key: not base64: %v", server.ErrInvalidConfig, err)
		}
		cfg.GossipKey = key
	}
	return cfg, cfg.Validate()
}

func newServerCmd(env cliEnv, runNode serverRunner) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "run one raftgate node",
		Example: `  # the first nodes of a new cluster
  raftgate server --node-id 1 --data-dir /var/lib/raftgate \
    --initial-cluster 1=10.0.0.1:5122,2=10.0.0.2:5122,3=10.0.0.3:5122 \
    --join 10.0.0.2:7946,10.0.0.3:7946
  # a node that joins the running cluster (an empty data dir; it is given an id)
  raftgate server --data-dir /var/lib/raftgate --join 10.0.0.1:7946 \
    --node-addr 10.0.0.4:5122 --gossip-addr 10.0.0.4:7946 \
    --ingress-addr 10.0.0.4:8080 --admin-addr 10.0.0.4:9070`,
		Args: cobra.NoArgs,
	}
	sf := newServerFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		// Flags and env are applied by now (root PersistentPreRunE); the
		// file fills the rest.
		if sf.configFile != "" {
			if err := applyConfigFile(cmd.Flags(), sf.configFile); err != nil {
				return err
			}
		}
		cfg, err := sf.toConfig()
		if err != nil {
			return err
		}
		if spec, ok := env.lookupEnv(server.FailpointEnv); ok && spec != "" {
			seed, _ := env.lookupEnv(server.FailpointSeedEnv)
			if cfg.Failpoint, err = server.ParseFailpoint(spec, seed); err != nil {
				return err
			}
		}
		logger, err := newLogger(env.stderr, cfg.LogFormat, cfg.LogLevel)
		if err != nil {
			return err
		}
		// Every line of a node's log names the node (the libraries below
		// do not add it themselves).
		if cfg.NodeID != 0 { // a joining node's is added once the cluster gave it
			logger = logger.With().Uint64("node", cfg.NodeID).Logger()
		}
		warnUnknownEnv(cmd, env, logger)
		logger.Info().Str("version", buildinfo.Read().Version).Str("data_dir", cfg.DataDir).
			Str("ingress", cfg.IngressAddr).Str("admin", cfg.AdminAddr).Str("node_addr", cfg.NodeAddr).
			Str("gossip", cfg.GossipAddr).Uint32("partitions", cfg.Partitions).
			Bool("node_tls", cfg.TLSCert != "").Bool("node_tls_verifies_peers", cfg.TLSCA != "").
			Bool("gossip_encrypted", len(cfg.GossipKey) > 0).Bool("ingress_tokens", cfg.IngressTokens != "").Bool("ingress_tls", cfg.IngressTLSCert != "").
			Msg("starting raftgate node")
		return runNode(cmd.Context(), cfg, logger)
	}
	return cmd
}

// joinedBefore reports whether dir is the data dir of a node that joined a
// cluster (its identity file names it).
func joinedBefore(dir string) bool {
	id, ok, err := cluster.LoadIdentity(dir)
	return err == nil && ok && id.NodeID != 0
}

// parseInitialCluster reads "1=host:port,2=host:port".
func parseInitialCluster(s string) (map[uint64]string, error) {
	out := make(map[uint64]string)
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		idText, addr, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not id=host:port", part)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(idText), 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%q: node id must be a positive integer", part)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("node %d is listed twice", id)
		}
		out[id] = strings.TrimSpace(addr)
	}
	return out, nil
}
