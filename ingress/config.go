package ingress

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/callback"
	"github.com/raftgate/raftgate/rpc"
)

// Dispatcher reaches the leader of a partition. It is implemented by
// ingress/dispatch.Client.
//
// Every method may be called from many goroutines at once. A method retries
// on NOT_LEADER, LOST_LEADERSHIP and broken streams with the same request
// until ctx is done, then returns an error wrapping rpc.ErrUnavailable.
// rpc.ErrNotFound, ErrNotReady, ErrInvalid and ErrOverloaded come back at
// once. The ingress does not keep or modify inv after Append returns.
type Dispatcher interface {
	// Append proposes inv to its partition and returns once the entry has
	// been applied (or was already there: PreviouslyAccepted).
	Append(ctx context.Context, partition uint32, inv *rpc.Invoke) (*rpc.Appended, error)
	// Output returns the result if it exists, rpc.ErrNotReady if the
	// invocation exists without one, rpc.ErrNotFound otherwise.
	Output(ctx context.Context, partition uint32, id []byte) (*rpc.InvocationResult, error)
	// Attach waits until the invocation has a result (rpc.ErrNotFound if
	// there is no such invocation).
	Attach(ctx context.Context, partition uint32, id []byte) (*rpc.InvocationResult, error)
}

// Caller is a Dispatcher that also appends a call and waits for its result
// in one request to the leader (see ingress/dispatch Client.Call). A call
// through a Dispatcher without it is an Append followed by an Attach.
type Caller interface {
	// Call appends inv, starting no retry after appendTimeout, and waits
	// for its result as long as ctx allows: Appended.Result is set if it
	// came. Without it the invocation was appended all the same (the
	// leader could not wait, or does not know calls), and the caller
	// attaches by id.
	Call(ctx context.Context, partition uint32, inv *rpc.Invoke, appendTimeout time.Duration) (*rpc.Appended, error)
}

// ServiceResolver finds a service in the replicated service registry for a
// request. Lookup is called on every call and send, from many goroutines at
// once. It returns an error wrapping rpc.ErrNotFound when there is no such
// service; any other error means the registry cannot say right now (503,
// retry).
//
// Lookup may answer a hit from a replica that lags, when the registration
// carries its RegisteredIndex: the handler sends that index with the
// invocation, and a partition told of a later change of the service refuses
// it (rpc.ErrStaleRegistry). A miss, or a registration without an index,
// must reflect every change answered before (the resolver catches up with
// the registry's leader first, bounded by ctx and by the resolver).
type ServiceResolver interface {
	Lookup(ctx context.Context, name string) (*rpc.Service, error)
}

// CurrentServiceResolver is a ServiceResolver that can also answer after
// catching up, hit or miss. The handler uses LookupCurrent after a
// partition refused an invocation as checked against a stale registration;
// with a plain ServiceResolver it asks Lookup again.
type CurrentServiceResolver interface {
	ServiceResolver
	LookupCurrent(ctx context.Context, name string) (*rpc.Service, error)
}

// Config configures a Handler. Partitions, Dispatcher and Services are
// required; any other zero field takes DefaultConfig's value, or means
// what its comment says (DefaultCallTimeout, ForwardHeaders, Tokens, ...).
type Config struct {
	// Partitions is the number of partitions (1..Partitions), fixed at
	// cluster bootstrap.
	Partitions uint32
	// Dispatcher reaches partition leaders.
	Dispatcher Dispatcher
	// Services is the service registry.
	Services ServiceResolver
	// Retention is how long completed results are kept; it sets the
	// idempotency-expires header (completed_at + Retention).
	Retention time.Duration
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	MaxBodyBytes int64
	// RejectReusedIdempotencyKeys refuses (422) a request whose idempotency
	// key names an invocation with another request body, for every service;
	// a service's registration may ask for it alone. False answers the
	// first invocation, as Restate does.
	RejectReusedIdempotencyKeys bool
	// BodyReadTimeout bounds the time to read a request body, from its
	// first byte awaited to its last; a body still incomplete then gets 408
	// and the connection is closed. Bodies are read before a request takes
	// one of the MaxConcurrent slots, so a client that trickles its body
	// holds no slot others need.
	BodyReadTimeout time.Duration
	// MaxConcurrent bounds the requests served at once (long-polls
	// included); beyond it requests are shed with 429 + Retry-After, never
	// queued.
	MaxConcurrent int
	// RequestTimeout bounds reaching the cluster: an append (call or send)
	// or an output read that has not been acknowledged by then gets 503 +
	// Retry-After.
	RequestTimeout time.Duration
	// DefaultCallTimeout bounds how long a call or attach waits for the
	// result when the client gave no timeout; 0 waits until the client goes
	// away. When it passes the answer is 470 with x-restate-id, as for a
	// client timeout.
	DefaultCallTimeout time.Duration
	// RetryAfter is the Retry-After sent with 429 and 503 (rounded up to
	// whole seconds, at least 1).
	RetryAfter time.Duration
	// ForwardHeaders names request headers copied into the invocation and
	// so sent to the service (e.g. "authorization", "traceparent"). Empty:
	// none, which keeps log entries small.
	ForwardHeaders []string
	// Tokens, when set, are the API tokens the ingress requires
	// (Authorization: Bearer) on every request but health; nil: no
	// authentication. Handler.SetTokens replaces them while serving.
	Tokens *Tokens
	// LocalPartitions, when set, returns the partitions this node leads,
	// sorted (0, the metadata group, and numbers over Partitions are
	// skipped). An invocation whose partition is free to choose (no
	// idempotency key, no object key) then gets a random key in one of
	// them, so that it is proposed on this node without a dispatch hop;
	// with none, or with LocalPartitions nil, its key is random over all
	// partitions. It is called on every such invocation and must not block.
	LocalPartitions func() []uint32
	// LocalTurn is how many such invocations in a row go to the same one
	// of the partitions led here before the next takes its turn: a node
	// leading several partitions then fills one partition's log entries
	// at a time, not all of them with a few commands each (each entry
	// costs every replica a log record, messages and an apply: see
	// docs/benchmarks.md), and over many turns its invocations still
	// spread evenly. Zero: DefaultConfig's.
	LocalTurn int
	// CallbackAllow is the allow-list of completion callback origins: a
	// request whose x-raftgate-callback is outside it gets 400. The zero
	// Allow refuses every callback URL.
	CallbackAllow callback.Allow
	// Clock stamps a delayed send's not_before for partition leaders older
	// than Invoke.delay_ms (a rolling upgrade); a newer leader stamps it
	// with its own clock instead. nil means time.Now.
	Clock func() time.Time
	// Logger receives the ingress's logs.
	Logger zerolog.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
}

// ErrInvalidConfig is returned (wrapped) by Config.Validate and New.
var ErrInvalidConfig = errors.New("invalid ingress config")

// DefaultConfig returns a config with production defaults; Dispatcher and
// Services must still be set.
func DefaultConfig() Config {
	return Config{
		Partitions:         1,
		Retention:          24 * time.Hour,
		MaxBodyBytes:       10 << 20,
		BodyReadTimeout:    10 * time.Second,
		MaxConcurrent:      4096,
		RequestTimeout:     10 * time.Second,
		DefaultCallTimeout: 0,
		RetryAfter:         time.Second,
		LocalTurn:          512,
		Clock:              time.Now,
		Logger:             zerolog.Nop(),
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Retention == 0 {
		c.Retention = d.Retention
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.BodyReadTimeout == 0 {
		c.BodyReadTimeout = d.BodyReadTimeout
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = d.MaxConcurrent
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = d.RetryAfter
	}
	if c.LocalTurn == 0 {
		c.LocalTurn = d.LocalTurn
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	return c
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Partitions < 1:
		return fmt.Errorf("%w: Partitions must be at least 1", ErrInvalidConfig)
	case c.Dispatcher == nil:
		return fmt.Errorf("%w: Dispatcher is nil", ErrInvalidConfig)
	case c.Services == nil:
		return fmt.Errorf("%w: Services is nil", ErrInvalidConfig)
	case c.Retention < 0:
		return fmt.Errorf("%w: Retention %v is negative", ErrInvalidConfig, c.Retention)
	case c.MaxBodyBytes <= 0:
		return fmt.Errorf("%w: MaxBodyBytes must be positive, got %d", ErrInvalidConfig, c.MaxBodyBytes)
	case c.BodyReadTimeout <= 0:
		return fmt.Errorf("%w: BodyReadTimeout must be positive, got %v", ErrInvalidConfig, c.BodyReadTimeout)
	case c.LocalTurn < 0:
		return fmt.Errorf("%w: LocalTurn must not be negative, got %d", ErrInvalidConfig, c.LocalTurn)
	case c.MaxConcurrent <= 0:
		return fmt.Errorf("%w: MaxConcurrent must be positive, got %d", ErrInvalidConfig, c.MaxConcurrent)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("%w: RequestTimeout must be positive, got %v", ErrInvalidConfig, c.RequestTimeout)
	case c.DefaultCallTimeout < 0:
		return fmt.Errorf("%w: DefaultCallTimeout %v is negative (0 means none)", ErrInvalidConfig, c.DefaultCallTimeout)
	case c.RetryAfter < 0:
		return fmt.Errorf("%w: RetryAfter %v is negative", ErrInvalidConfig, c.RetryAfter)
	}
	for _, name := range c.ForwardHeaders {
		if name == "" {
			return fmt.Errorf("%w: ForwardHeaders contains an empty name", ErrInvalidConfig)
		}
	}
	return nil
}
