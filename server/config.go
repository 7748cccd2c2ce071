package server

import (
	"errors"
	"fmt"
	"github.com/raftgate/raftgate/partition"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftgate/raftgate/callback"
	"github.com/raftgate/raftgate/raftlog"

	"github.com/rs/zerolog"
)

// Config is everything `raftgate server` needs to run one node. Each
// field maps to the flag named in its comment.
type Config struct {
	// NodeID is this node's Raft id (--node-id); must be a key of
	// InitialCluster.
	NodeID uint64
	// DataDir holds the node's Raft logs and state (--data-dir).
	DataDir string

	// IngressAddr is where the ingress HTTP API listens (--ingress-addr).
	IngressAddr string
	// AdminAddr is where the admin HTTP API listens (--admin-addr).
	AdminAddr string
	// NodeAddr is where this node's gRPC (Raft transport and dispatch)
	// listens (--node-addr). It may differ from this node's entry in
	// InitialCluster (behind a proxy or NAT); never derive one from the other.
	NodeAddr string
	// GossipAddr is where memberlist listens, TCP and UDP (--gossip-addr).
	GossipAddr string
	// AdvertiseGossipAddr is the gossip address others should use, when it
	// differs from GossipAddr (--advertise-gossip-addr; empty = GossipAddr).
	AdvertiseGossipAddr string

	// InitialCluster maps every voter's id to the address the other nodes
	// dial to reach it (--initial-cluster "1=host:port,2=..."); the same on
	// every node.
	InitialCluster map[uint64]string
	// Join lists gossip addresses to join at start (--join). A node
	// started with neither NodeID nor InitialCluster joins the cluster
	// they lead to, and is given an id (docs/operations.md, "Adding,
	// removing and replacing nodes").
	Join []string
	// Zone labels the node's failure domain (--zone), shown in the node
	// table.
	Zone string
	// Replace, for a joining node, is the id of a node it takes over: once
	// it is a voter everywhere, that node is drained and removed
	// (--replace).
	Replace uint64
	// Replication is the replication factor (--replication): a node is
	// not removed (without force) when fewer active nodes would remain.
	Replication int
	// DeadNodeTimeout is how long a node may be gone from gossip before
	// its replicas are placed on other nodes (--dead-node-timeout).
	DeadNodeTimeout time.Duration
	// Partitions is the number of partitions, fixed at bootstrap
	// (--partitions).
	Partitions uint32
	// Retention is how long completed results are kept (--retention).
	Retention time.Duration
	// BalanceLeaders moves each partition's leadership to its preferred
	// node when that node is up and replicating, spreading the leaders over
	// the cluster (--balance-leaders; on by default, see
	// docs/operations.md "Leader balancing").
	BalanceLeaders bool
	// Placement says where an invocation goes whose partition is free to
	// choose (no idempotency key, no object key): PlacementLocal, a
	// partition this node leads when it leads one, or PlacementSpread, any
	// partition (--placement; docs/operations.md "Placement").
	Placement string

	// RetryMaxAttempts, RetryInitialBackoff, RetryMaxBackoff and
	// RetryAttemptTimeout are the cluster's default retry policy of
	// deliveries, for services registered without their own
	// (--retry-max-attempts, --retry-initial-backoff, --retry-max-backoff,
	// --retry-attempt-timeout). Give every node the same values: each
	// partition's leader delivers with its own.
	RetryMaxAttempts    uint32
	RetryInitialBackoff time.Duration
	RetryMaxBackoff     time.Duration
	RetryAttemptTimeout time.Duration
	// RetryOnMaxAttempts is what exhausted attempts do by default: "pause"
	// (keep the invocation, paused, for an operator) or "fail" (record a
	// terminal failure) (--retry-on-max-attempts).
	RetryOnMaxAttempts string
	// BulkChunk bounds the invocations one step of a bulk operation walks
	// (--bulk-chunk; partition.Config.BulkChunk).
	BulkChunk int
	// RejectReusedIdempotencyKeys answers 422 to a request whose
	// idempotency key names an invocation with another body, for every
	// service (--reject-reused-idempotency-keys).
	RejectReusedIdempotencyKeys bool

	// CallbackAllow lists the origins (scheme://host[:port]) completion
	// callbacks may be POSTed to (--callback-allow); a send naming another
	// URL gets 400, and none is allowed when it is empty. Give every node
	// the same list: each partition's leader checks it again before a
	// POST. CallbackSecret signs every callback POST (HMAC-SHA256 in
	// x-raftgate-signature; --callback-secret, better given through
	// RAFTGATE_CALLBACK_SECRET or the config file); empty sends none.
	CallbackAllow  []string
	CallbackSecret string

	// ShutdownGrace bounds the graceful part of shutdown (--shutdown-grace).
	ShutdownGrace time.Duration
	// DrainDelay is how long, on shutdown, the ingress keeps accepting
	// connections and answering 503 (health included) before it stops
	// accepting, so that a load balancer takes the node out first
	// (--drain-delay; at most half of ShutdownGrace).
	DrainDelay time.Duration
	// RequestTimeout is the ingress's deadline for one request, retries
	// included (--request-timeout).
	RequestTimeout time.Duration
	// MaxConcurrent caps the ingress's concurrent requests; over it, 429
	// (--max-concurrent).
	MaxConcurrent int
	// MaxBodyBytes caps an ingress request body; over it, 413
	// (--max-body-bytes).
	MaxBodyBytes int64
	// BodyReadTimeout bounds the time to read an ingress request body;
	// a body still incomplete then gets 408 (--body-read-timeout).
	BodyReadTimeout time.Duration
	// CheckpointInterval is how often applied state is committed to
	// state.db (--checkpoint-interval): off the acknowledgement path, it
	// bounds what a restart replays from the log.
	CheckpointInterval time.Duration

	// TLSCert and TLSKey (PEM files) enable TLS on node-to-node gRPC
	// (--tls-cert, --tls-key); TLSCA additionally requires and verifies
	// peer certificates signed by it (mutual TLS, --tls-ca).
	TLSCert, TLSKey, TLSCA string
	// IngressTLSCert and IngressTLSKey (PEM files) serve the ingress over
	// TLS, HTTP/2 by ALPN and HTTP/1.1 (--ingress-tls-cert,
	// --ingress-tls-key); without them it is cleartext HTTP/1.1 and h2c.
	IngressTLSCert, IngressTLSKey string
	// GossipKey encrypts memberlist traffic: 16, 24 or 32 bytes, given
	// base64-encoded (--gossip-key); nil = unencrypted.
	GossipKey []byte
	// AdminToken, when set, is required as a bearer token by the admin
	// API except its health probes (--admin-token).
	AdminToken string
	// IngressTokens is a token file (TOML): when set, the ingress requires
	// one of its API tokens on every request but health, each limited to
	// the services and reads it grants; re-read on SIGHUP
	// (--ingress-tokens; see docs/operations.md "Ingress authentication").
	IngressTokens string
	// Pprof serves /debug/pprof on the admin port (--pprof).
	Pprof bool

	// Logger receives the node's log; the zero value discards it.
	// `raftgate server` builds it from --log-format and --log-level.
	Logger zerolog.Logger
	// QuietRaft drops the raft library's info-level messages (elections,
	// votes, configuration); `dev` sets it below --log-level debug. No flag.
	QuietRaft bool
	// OpenIngressExpected silences the warning a node logs when its ingress
	// starts serving without IngressTokens; `dev` sets it. No flag.
	OpenIngressExpected bool
	// Failpoint, from RAFTGATE_FAILPOINT (crash tests only, failpoint.go),
	// kills the process at a storage durability boundary. No flag.
	Failpoint *Failpoint
}

// Defaults of `raftgate server`, also used by `dev` for node 1.
const (
	DefaultIngressAddr = "127.0.0.1:8080"
	DefaultAdminAddr   = "127.0.0.1:9070"
	DefaultNodeAddr    = "127.0.0.1:5122"
	DefaultGossipAddr  = "127.0.0.1:7946"
	// DefaultPartitions is the smallest count with which a cluster grown
	// to 7 nodes (R = 3) balances: 3 replicas and 1 leader on each. On
	// three nodes it costs within a few percent of 2 for unkeyed traffic,
	// since led partitions take turns (ingress.Config.LocalTurn); keyed
	// traffic spread over every partition pays for smaller batches
	// (docs/benchmarks.md, "The partition count on three nodes").
	DefaultPartitions = 7
	// DefaultReplication: three replicas survive one failure.
	DefaultReplication = 3
	// maxPartitions keeps a typo from creating thousands of Raft groups.
	maxPartitions = 1024
)

// Values of --placement.
const (
	// PlacementLocal puts an invocation whose partition is free to choose
	// in a partition the receiving node leads, which saves the hop to
	// another node; it spreads the work as evenly as the clients spread
	// their requests over the nodes.
	PlacementLocal = "local"
	// PlacementSpread puts it in any partition, uniformly.
	PlacementSpread = "spread"
)

// DefaultConfig is a single-node cluster (node 1) on the default
// addresses; DataDir is left empty because it must be chosen.
func DefaultConfig() Config {
	return Config{
		NodeID:          1,
		IngressAddr:     DefaultIngressAddr,
		AdminAddr:       DefaultAdminAddr,
		NodeAddr:        DefaultNodeAddr,
		GossipAddr:      DefaultGossipAddr,
		InitialCluster:  map[uint64]string{1: DefaultNodeAddr},
		Partitions:      DefaultPartitions,
		Replication:     DefaultReplication,
		DeadNodeTimeout: 5 * time.Minute,
		Retention:       24 * time.Hour,
		BalanceLeaders:  true,
		Placement:       PlacementLocal,
		ShutdownGrace:   10 * time.Second,
		// The retry defaults are outbox.DefaultPolicy's.
		RetryMaxAttempts:    10,
		RetryInitialBackoff: 100 * time.Millisecond,
		RetryMaxBackoff:     30 * time.Second,
		RetryAttemptTimeout: 30 * time.Second,
		RetryOnMaxAttempts:  "pause",
		BulkChunk:           partition.DefaultBulkChunk,
		RequestTimeout:      30 * time.Second,
		MaxConcurrent:       1024,
		MaxBodyBytes:        10 << 20,
		BodyReadTimeout:     10 * time.Second,
		CheckpointInterval:  raftlog.DefaultConfig().CheckpointInterval,
	}
}

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("invalid configuration")

func invalid(flag, format string, args ...any) error {
	return fmt.Errorf("%w: --%s: %s", ErrInvalidConfig, flag, fmt.Sprintf(format, args...))
}

// Validate checks the config; each error names the flag to fix.
func (c Config) Validate() error {
	if c.NodeID == 0 && len(c.InitialCluster) > 0 {
		return invalid("node-id", "must be at least 1 (a node joining a running cluster is given neither --node-id nor --initial-cluster)")
	}
	if c.Replace != 0 && !c.joinMode() {
		return invalid("replace", "only a joining node (no --node-id, no --initial-cluster) replaces another")
	}
	if c.joinMode() && len(c.Join) == 0 {
		return invalid("join", "required without --node-id and --initial-cluster: the gossip addresses of the cluster to join (or give --node-id and --initial-cluster to bootstrap a new cluster)")
	}
	if c.Replication < 1 {
		return invalid("replication", "must be at least 1")
	}
	if c.DeadNodeTimeout < time.Second {
		return invalid("dead-node-timeout", "must be at least 1s, like 5m")
	}
	if strings.TrimSpace(c.DataDir) == "" {
		return invalid("data-dir", "required: the directory for this node's Raft logs and state")
	}
	for _, a := range []struct{ flag, addr string }{
		{"ingress-addr", c.IngressAddr}, {"admin-addr", c.AdminAddr},
		{"node-addr", c.NodeAddr}, {"gossip-addr", c.GossipAddr},
	} {
		if err := checkHostPort(a.addr); err != nil {
			return invalid(a.flag, "%v", err)
		}
	}
	if c.AdvertiseGossipAddr != "" {
		if err := checkHostPort(c.AdvertiseGossipAddr); err != nil {
			return invalid("advertise-gossip-addr", "%v", err)
		}
	}
	if len(c.InitialCluster) == 0 && !c.joinMode() {
		return invalid("initial-cluster", `required with --node-id: every voter as id=host:port, like "1=127.0.0.1:5122"`)
	}
	seen := make(map[string]uint64, len(c.InitialCluster))
	for _, id := range slices.Sorted(maps.Keys(c.InitialCluster)) {
		addr := c.InitialCluster[id]
		if id == 0 {
			return invalid("initial-cluster", "node ids must be at least 1")
		}
		if err := checkHostPort(addr); err != nil {
			return invalid("initial-cluster", "node %d: %v", id, err)
		}
		if other, dup := seen[addr]; dup {
			return invalid("initial-cluster", "nodes %d and %d have the same address %s", other, id, addr)
		}
		seen[addr] = id
	}
	if _, ok := c.InitialCluster[c.NodeID]; !ok && !c.joinMode() {
		return invalid("node-id", "%d must be in --initial-cluster (%s)", c.NodeID, FormatInitialCluster(c.InitialCluster))
	}
	for _, j := range c.Join {
		if err := checkHostPort(j); err != nil {
			return invalid("join", "%v", err)
		}
	}
	if c.Partitions == 0 || c.Partitions > maxPartitions {
		return invalid("partitions", "%d is out of range 1..%d", c.Partitions, maxPartitions)
	}
	if c.Retention <= 0 {
		return invalid("retention", "must be positive, like 24h")
	}
	if _, err := callback.ParseAllow(c.CallbackAllow); err != nil {
		return invalid("callback-allow", "%v", err)
	}
	if c.RetryMaxAttempts < 1 {
		return invalid("retry-max-attempts", "must be at least 1")
	}
	if c.RetryInitialBackoff < time.Millisecond {
		return invalid("retry-initial-backoff", "must be at least 1ms")
	}
	if c.RetryMaxBackoff < c.RetryInitialBackoff {
		return invalid("retry-max-backoff", "must not be below --retry-initial-backoff (%v)", c.RetryInitialBackoff)
	}
	if c.RetryAttemptTimeout < time.Millisecond {
		return invalid("retry-attempt-timeout", "must be at least 1ms")
	}
	if c.RetryOnMaxAttempts != "pause" && c.RetryOnMaxAttempts != "fail" {
		return invalid("retry-on-max-attempts", "must be pause or fail, not %q", c.RetryOnMaxAttempts)
	}
	if c.BulkChunk < 1 {
		return invalid("bulk-chunk", "must be at least 1")
	}
	if c.ShutdownGrace < 0 {
		return invalid("shutdown-grace", "must not be negative")
	}
	if c.DrainDelay < 0 || c.DrainDelay > c.ShutdownGrace/2 {
		return invalid("drain-delay", "must be between 0 and half of --shutdown-grace (%v)", c.ShutdownGrace/2)
	}
	if c.RequestTimeout <= 0 {
		return invalid("request-timeout", "must be positive, like 30s")
	}
	if c.Placement != PlacementLocal && c.Placement != PlacementSpread {
		return invalid("placement", "%q is not %s or %s", c.Placement, PlacementLocal, PlacementSpread)
	}
	if c.MaxConcurrent <= 0 {
		return invalid("max-concurrent", "must be at least 1")
	}
	if c.MaxBodyBytes <= 0 {
		return invalid("max-body-bytes", "must be at least 1")
	}
	if c.BodyReadTimeout <= 0 {
		return invalid("body-read-timeout", "must be positive, like 10s")
	}
	if c.CheckpointInterval < time.Millisecond || c.CheckpointInterval > time.Minute {
		return invalid("checkpoint-interval", "must be from 1ms to 1m, like 100ms")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return invalid("tls-cert", "--tls-cert and --tls-key go together")
	}
	if (c.IngressTLSCert == "") != (c.IngressTLSKey == "") {
		return invalid("ingress-tls-cert", "--ingress-tls-cert and --ingress-tls-key go together")
	}
	if c.TLSCA != "" && c.TLSCert == "" {
		return invalid("tls-ca", "mutual TLS needs this node's own --tls-cert and --tls-key too")
	}
	switch len(c.GossipKey) {
	case 0, 16, 24, 32:
	default:
		return invalid("gossip-key", "decodes to %d bytes; memberlist needs 16, 24 or 32", len(c.GossipKey))
	}
	return nil
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if host == "" {
		return fmt.Errorf("%q has no host (use 0.0.0.0 to listen on every interface)", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: port must be 1..65535", addr)
	}
	return nil
}

// FormatInitialCluster prints the map in --initial-cluster form, by id.
func FormatInitialCluster(m map[uint64]string) string {
	parts := make([]string, 0, len(m))
	for _, id := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d=%s", id, m[id]))
	}
	return strings.Join(parts, ",")
}
