package partition

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftgate/raftgate/callback"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
)

// Log is what the processor needs of its Raft group; *raftlog.Group
// satisfies it. All methods are safe for concurrent use.
type Log interface {
	// Propose appends data if this node leads; fails at once with
	// *raftlog.NotLeaderError, raftlog.ErrProposalDropped or
	// raftlog.ErrStopped.
	Propose(ctx context.Context, data []byte) (raftlog.Proposal, error)
	// ReadIndex returns once this node, still leader, applied everything
	// committed before the call.
	ReadIndex(ctx context.Context) error
	// View runs fn over the group's state bucket as applied so far, on
	// the applier that every partition of the node shares: for short
	// reads (a record, a bounded scan).
	View(ctx context.Context, fn func(b *bolt.Bucket) error) error
	// ViewCheckpoint runs fn over the state applied before the call, in a
	// read transaction of its own, beside the applier: for long reads
	// (listings, backlog counts), which must not hold up other
	// partitions' acknowledgements.
	ViewCheckpoint(ctx context.Context, fn func(b *bolt.Bucket) error) error
	// Status returns the group's state on this node.
	Status() raftlog.Status
}

// ServiceLookup resolves a registered service by name from the replicated
// registry (registry.InvokerLookup). Lookup is called from the invoker's
// goroutines and must be safe for concurrent use; ctx ends when the
// delivery is abandoned (this node lost the partition's leadership). It
// returns an error wrapping rpc.ErrNotFound only when the registry, caught
// up with its leader, says the service is not registered (the invoker then
// fails the invocation for good); any other error means it cannot tell
// now, and the attempt is retried.
type ServiceLookup interface {
	Lookup(ctx context.Context, name string) (*rpc.Service, error)
}

// InvokerConfig configures how the leader runs invocations.
type InvokerConfig struct {
	// Retry is the cluster's default retry rule for failed deliveries,
	// attempt timeout included; a service's registration may override its
	// fields (rpc.Service.Retry, applied with outbox.Policy.For at each
	// delivery).
	Retry outbox.Policy
	// Concurrency bounds deliveries in flight per partition.
	Concurrency int
	// ServiceConcurrency bounds deliveries in flight per service within
	// the partition.
	ServiceConcurrency int
	// MaxResultBytes bounds a service's answer body; a longer one is a
	// terminal failure.
	MaxResultBytes int64
	// ScanLimit bounds the outbox entries one scan reads the record of,
	// picks or passes over for a full service, so a backlog of a
	// saturated service costs bounded work per scan. A scan walks at
	// most 8 times as many keys: those it passes over without a record
	// (reserved, marked, held behind their group), and jumps the stretch
	// of them an earlier scan found (flow.go, "The scan window").
	ScanLimit int
	// IdleRecheck is the longest the invoker waits without rescanning the
	// outbox (guards against clock jumps and missed wake-ups).
	IdleRecheck time.Duration
}

// CallbackConfig configures how the leader POSTs completion callbacks
// (callbacks.go).
type CallbackConfig struct {
	// Allow is the operator's allow-list of callback origins. The ingress
	// refuses other URLs; the leader checks again before each POST, so an
	// origin removed from the list is not called any more (the callback
	// fails).
	Allow callback.Allow
	// Secret signs each POST (x-raftgate-signature, HMAC-SHA256 of the
	// body); empty: no signature header.
	Secret []byte
	// Retry is the retry rule of failed POSTs (a 4xx other than 408 and
	// 429 is not retried); when MaxAttempts are spent the callback is
	// FAILED, and the invocation's result is unaffected.
	Retry outbox.Policy
	// Concurrency bounds the POSTs in flight per partition.
	Concurrency int
}

// Config configures a Processor. Partition and Services are required; any
// other zero field takes DefaultConfig's value (a zero Retry policy is
// DefaultConfig's whole policy).
type Config struct {
	// Partition is this processor's partition (1..P).
	Partition uint32
	// Partitions is P, the cluster's partition count, among which
	// cluster-wide limits are split (flow.go).
	Partitions uint32
	// Retention is how long results are kept after completion.
	Retention time.Duration
	// SweepInterval is how often the leader proposes Purge for expired
	// results; results live between Retention and Retention+SweepInterval.
	SweepInterval time.Duration
	// PurgeLimit bounds the results one Purge deletes, so that one entry's
	// apply (in the transaction every group shares) stays short however
	// much expired; the sweeper proposes the next as soon as one applies.
	PurgeLimit int
	// BulkChunk bounds the listing entries one step of a bulk operation
	// walks (Bulk.chunk), so that one entry's apply stays short however
	// many invocations the operation changes.
	BulkChunk int
	// Invoker configures delivery to services.
	Invoker InvokerConfig
	// Callbacks configures the delivery of completion callbacks.
	Callbacks CallbackConfig

	// MaxPending bounds requests waiting for their entry to apply;
	// further requests fail with rpc.ErrOverloaded.
	MaxPending int
	// MaxAttachWaiters bounds attach long-polls.
	MaxAttachWaiters int
	// MaxBatchCommands and MaxBatchBytes bound one log entry's batch.
	MaxBatchCommands int
	MaxBatchBytes    int
	// InFlightBatches is how many of the leader's batches may be proposed
	// and not yet applied before the proposer holds the next one: while
	// held, commands that arrive join it, so a loaded partition proposes
	// fewer, larger entries (each entry costs every replica a log record,
	// messages and an apply). A held batch goes once an apply catches up
	// or InFlightWait has passed, whichever is first; an idle partition
	// never holds. Negative proposes every batch at once.
	InFlightBatches int
	InFlightWait    time.Duration
	// ProposeTimeout bounds one Propose call.
	ProposeTimeout time.Duration

	// Services resolves service names for the invoker (and the dispatch
	// of keyed schedule runs).
	Services ServiceLookup
	// Dispatch appends the runs of schedules with a keyed target in their
	// key's partition (scheduledispatch.go); nil leaves them recorded and
	// not run.
	Dispatch Dispatch
	// HTTPClient calls services; nil uses a client with keep-alive
	// connections sized for Invoker.Concurrency.
	HTTPClient *http.Client
	// Clock stamps commands and schedules deliveries; nil is time.Now.
	Clock func() time.Time
	// Logger is the parent logger; the processor adds its partition.
	Logger zerolog.Logger
	// Registerer receives the processor's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Knobs are testing hooks; nil in production.
	Knobs *Knobs
}

// Knobs are optional testing hooks at the invoker's boundaries.
type Knobs struct {
	// BeforeOutboxSend runs before a delivery's HTTP request.
	BeforeOutboxSend func(id []byte, attempt uint32)
	// AfterServiceAnswer runs after a delivery finished and before its
	// outcome is proposed; returning false drops the outcome, as if the
	// leader crashed between the service's answer and Complete.
	AfterServiceAnswer func(id []byte, attempt uint32) bool
	// JitterSeed seeds the backoff jitter (0 picks one).
	JitterSeed uint64
	// BatchHeld runs when the proposer holds a batch of n commands
	// because InFlightBatches are not yet applied (and again as it grows).
	BatchHeld func(n int)
}

// DefaultConfig returns production defaults for partition 1.
func DefaultConfig() Config {
	return Config{
		Partition:     1,
		Partitions:    1,
		Retention:     24 * time.Hour,
		SweepInterval: time.Minute,
		PurgeLimit:    100,
		BulkChunk:     DefaultBulkChunk,
		Invoker: InvokerConfig{
			Retry:              outbox.DefaultPolicy(),
			Concurrency:        256,
			ServiceConcurrency: 128,
			MaxResultBytes:     10 << 20,
			ScanLimit:          8192,
			IdleRecheck:        time.Second,
		},
		Callbacks: CallbackConfig{
			Retry: outbox.Policy{MaxAttempts: 20, BackoffBase: 200 * time.Millisecond, BackoffMax: time.Minute,
				MaxRetryAfter: 5 * time.Minute, AttemptTimeout: 10 * time.Second},
			Concurrency: 32,
		},
		MaxPending:       16384,
		MaxAttachWaiters: 16384,
		MaxBatchCommands: 512,
		MaxBatchBytes:    512 << 10,
		InFlightBatches:  1,
		InFlightWait:     5 * time.Millisecond,
		ProposeTimeout:   5 * time.Second,
		Logger:           zerolog.Nop(),
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setZero(&c.Partitions, max(d.Partitions, c.Partition))
	setZero(&c.Retention, d.Retention)
	setZero(&c.SweepInterval, d.SweepInterval)
	setZero(&c.PurgeLimit, d.PurgeLimit)
	setZero(&c.BulkChunk, d.BulkChunk)
	setZero(&c.Invoker.Retry, d.Invoker.Retry)
	setZero(&c.Invoker.Concurrency, d.Invoker.Concurrency)
	setZero(&c.Invoker.ServiceConcurrency, d.Invoker.ServiceConcurrency)
	setZero(&c.Invoker.MaxResultBytes, d.Invoker.MaxResultBytes)
	setZero(&c.Invoker.ScanLimit, d.Invoker.ScanLimit)
	setZero(&c.Invoker.IdleRecheck, d.Invoker.IdleRecheck)
	setZero(&c.Callbacks.Retry, d.Callbacks.Retry)
	setZero(&c.Callbacks.Concurrency, d.Callbacks.Concurrency)
	setZero(&c.MaxPending, d.MaxPending)
	setZero(&c.MaxAttachWaiters, d.MaxAttachWaiters)
	setZero(&c.MaxBatchCommands, d.MaxBatchCommands)
	setZero(&c.MaxBatchBytes, d.MaxBatchBytes)
	setZero(&c.InFlightBatches, d.InFlightBatches)
	setZero(&c.InFlightWait, d.InFlightWait)
	setZero(&c.ProposeTimeout, d.ProposeTimeout)
	return c
}

// setZero sets *v to d when *v is its type's zero value.
func setZero[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate names the first bad field. Zero fields are valid but for
// Partition and Services: they take DefaultConfig's values.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Partition == 0:
		return errors.New("partition: Partition must be >= 1")
	case c.Partitions < c.Partition:
		return errors.New("partition: Partitions must be >= Partition")
	case c.Retention <= 0:
		return errors.New("partition: Retention must be > 0")
	case c.SweepInterval <= 0:
		return errors.New("partition: SweepInterval must be > 0")
	case c.PurgeLimit < 1:
		return errors.New("partition: PurgeLimit must be >= 1")
	case c.BulkChunk < 1:
		return errors.New("partition: BulkChunk must be >= 1")
	case c.Invoker.Concurrency < 1:
		return errors.New("partition: Invoker.Concurrency must be >= 1")
	case c.Invoker.ServiceConcurrency < 1:
		return errors.New("partition: Invoker.ServiceConcurrency must be >= 1")
	case c.Invoker.MaxResultBytes <= 0:
		return errors.New("partition: Invoker.MaxResultBytes must be > 0")
	case c.Invoker.ScanLimit < 1:
		return errors.New("partition: Invoker.ScanLimit must be >= 1")
	case c.Invoker.IdleRecheck <= 0:
		return errors.New("partition: Invoker.IdleRecheck must be > 0")
	case c.Callbacks.Concurrency < 1:
		return errors.New("partition: Callbacks.Concurrency must be >= 1")
	case c.MaxPending < 1:
		return errors.New("partition: MaxPending must be >= 1")
	case c.MaxAttachWaiters < 1:
		return errors.New("partition: MaxAttachWaiters must be >= 1")
	case c.MaxBatchCommands < 1:
		return errors.New("partition: MaxBatchCommands must be >= 1")
	case c.MaxBatchBytes < 1:
		return errors.New("partition: MaxBatchBytes must be >= 1")
	case c.InFlightBatches > 0 && c.InFlightWait <= 0:
		return errors.New("partition: InFlightWait must be > 0 when InFlightBatches is")
	case c.ProposeTimeout <= 0:
		return errors.New("partition: ProposeTimeout must be > 0")
	case c.Services == nil:
		return errors.New("partition: Services must be set")
	}
	if err := c.Invoker.Retry.Validate(); err != nil {
		return fmt.Errorf("partition: Invoker.Retry: %w", err)
	}
	if err := c.Callbacks.Retry.Validate(); err != nil {
		return fmt.Errorf("partition: Callbacks.Retry: %w", err)
	}
	return nil
}

// Compile-time checks of the contracts with raftlog.
var (
	_ Log                  = (*raftlog.Group)(nil)
	_ raftlog.StateMachine = (*Processor)(nil)
)
