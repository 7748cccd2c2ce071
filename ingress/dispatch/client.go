package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("dispatch: client closed")

// errUnexpectedAnswer: the server answered with a body that does not fit
// the request (a version mismatch or a bug); not retried.
var errUnexpectedAnswer = errors.New("dispatch: unexpected answer")

// Resolver tells the client which node leads a partition. It is satisfied
// by *leadership.Membership. Both methods are called from many goroutines
// and must not block.
type Resolver interface {
	// Leader returns the partition's leader as far as known; ok is false
	// when none is.
	Leader(partition uint32) (leader, term uint64, ok bool)
	// Hint records the leader a NOT_LEADER answer named (leader > 0).
	Hint(partition uint32, leader, term uint64)
}

// ClientConfig configures a Client. Zero durations and bounds take the
// defaults of DefaultClientConfig.
type ClientConfig struct {
	// Self is this node's id: with no leader known, it is tried first.
	Self uint64
	// Peers maps every node id to the gRPC address to dial (the
	// --initial-cluster list). Required.
	Peers map[uint64]string
	// DialOptions are added to every connection (TLS credentials,
	// keepalive...). Without transport credentials among them, connections
	// are insecure.
	DialOptions []grpc.DialOption
	// Resolver gives the leader to try first; nil tries nodes in turn.
	Resolver Resolver
	// Local, when set, is this node's own Backend (the one its Server
	// serves): an attempt on Self runs on it in process, with the same
	// answers as over a stream but without gRPC. Nil sends every attempt
	// over a stream, Self's included.
	Local Backend
	// MaxInFlightPerNode bounds attempts waiting on one node; past it a
	// call fails at once with rpc.ErrOverloaded.
	MaxInFlightPerNode int
	// BackoffBase and BackoffMax shape the delay between retries.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// DefaultTimeout bounds calls whose context has no deadline (Attach
	// and Call excepted: they wait as long as their context).
	DefaultTimeout time.Duration
	Logger         zerolog.Logger
	// Registerer receives the client's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// DefaultClientConfig returns the defaults (Peers still to be filled in).
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		MaxInFlightPerNode: 4096,
		BackoffBase:        50 * time.Millisecond,
		BackoffMax:         time.Second,
		DefaultTimeout:     30 * time.Second,
		Logger:             zerolog.Nop(),
	}
}

// ErrInvalidConfig is wrapped by NewClient's config errors.
var ErrInvalidConfig = errors.New("dispatch: invalid config")

// Validate names the first bad field (after defaults are applied).
func (c ClientConfig) Validate() error {
	c = c.withDefaults()
	if len(c.Peers) == 0 {
		return fmt.Errorf("%w: Peers is empty", ErrInvalidConfig)
	}
	for id, addr := range c.Peers {
		if id == 0 || addr == "" {
			return fmt.Errorf("%w: Peers entry %d=%q", ErrInvalidConfig, id, addr)
		}
	}
	if c.BackoffMax < c.BackoffBase {
		return fmt.Errorf("%w: BackoffMax must be >= BackoffBase", ErrInvalidConfig)
	}
	return nil
}

func (c ClientConfig) withDefaults() ClientConfig {
	d := DefaultClientConfig()
	if c.MaxInFlightPerNode <= 0 {
		c.MaxInFlightPerNode = d.MaxInFlightPerNode
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = d.BackoffBase
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = d.BackoffMax
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = d.DefaultTimeout
	}
	return c
}

// Client sends dispatch requests to the node that leads each partition,
// over one pipelined stream per node, and retries them as described in the
// package comment. Safe for concurrent use.
type Client struct {
	cfg         ClientConfig
	log         zerolog.Logger
	metrics     *clientMetrics
	dialOptions []grpc.DialOption
	// set is the nodes the client dials, replaced whole by SetPeers.
	set atomic.Pointer[peerSet]

	// ctx ends when the client closes; streams live under it.
	ctx    context.Context
	cancel context.CancelFunc
	// mu orders spawn against Close; closed is set under it.
	mu     sync.Mutex
	closed atomic.Bool
	// wg tracks stream opens and stream send/receive loops.
	wg sync.WaitGroup
}

// spawn runs f on a goroutine tracked by Close, unless the client is
// closed.
func (c *Client) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// NewClient returns a client; connections are dialled on first use.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Client{
		cfg: cfg,
		log: cfg.Logger.With().Str("component", "dispatch-client").Logger(),
	}
	c.metrics = newClientMetrics(cfg.Registerer, c.log)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	// Reconnect quickly to a node that comes back (gRPC's default backoff
	// grows to 2 minutes); caller options come later and win.
	c.dialOptions = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}, cfg.DialOptions...)
	c.set.Store(c.newPeerSet(cfg.Peers, nil))
	return c, nil
}

// peerSet is the nodes the client dials: each node's peer, and the order
// they are tried in when no leader is known (Self first, then ascending).
type peerSet struct {
	byID  map[uint64]*peer
	order []uint64
}

// newPeerSet builds the set for addrs, keeping old's peer (its connection
// and streams) for a node whose address did not change.
func (c *Client) newPeerSet(addrs map[uint64]string, old *peerSet) *peerSet {
	s := &peerSet{byID: make(map[uint64]*peer, len(addrs))}
	for id, addr := range addrs {
		if p, ok := old.get(id); ok && p.addr == addr {
			s.byID[id] = p
		} else {
			s.byID[id] = &peer{c: c, id: id, addr: addr}
		}
		if id != c.cfg.Self {
			s.order = append(s.order, id)
		}
	}
	slices.Sort(s.order)
	if _, ok := addrs[c.cfg.Self]; ok {
		s.order = append([]uint64{c.cfg.Self}, s.order...)
	}
	return s
}

func (s *peerSet) get(id uint64) (*peer, bool) {
	if s == nil {
		return nil, false
	}
	p, ok := s.byID[id]
	return p, ok
}

// SetPeers replaces the nodes the client dials (the cluster's members, as
// they join and leave). A node whose address changed, or that left, has its
// connection closed; calls in flight on it fail and are retried elsewhere.
func (c *Client) SetPeers(addrs map[uint64]string) error {
	for id, addr := range addrs {
		if id == 0 || addr == "" {
			return fmt.Errorf("%w: Peers entry %d=%q", ErrInvalidConfig, id, addr)
		}
	}
	c.mu.Lock()
	old := c.set.Load()
	next := c.newPeerSet(addrs, old)
	c.set.Store(next)
	c.mu.Unlock()
	for id, p := range old.byID {
		if q, ok := next.byID[id]; !ok || q != p {
			_ = p.close()
		}
	}
	return nil
}

// Close fails every call in progress with ErrClosed, closes streams and
// connections and waits for the client's goroutines.
func (c *Client) Close() error {
	c.mu.Lock()
	already := c.closed.Swap(true)
	c.mu.Unlock()
	if already {
		return nil
	}
	c.cancel()
	c.wg.Wait()
	var errs []error
	for _, p := range c.set.Load().byID {
		if err := p.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Append asks the partition's leader to append an invocation and answers
// once it is applied. The request id is inv.RequestId, or a fresh one (on a
// copy of inv) when it has none; every retry reuses it.
func (c *Client) Append(ctx context.Context, partitionID uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	return c.appendInvocation(ctx, opAppend, partitionID, inv, time.Time{})
}

// Call appends inv and waits for its result in one request to the
// partition's leader (AppendInvocation.attach), the request id chosen as
// for Append. The answer's Result is nil when the leader could not wait
// for it (it lost leadership, ctx's deadline passed, or it is of a release
// before calls): the invocation was appended all the same, and the caller
// attaches to it by id. Failed attempts are retried as for Append, but none
// is started after appendTimeout (from now) has passed; an attempt that
// reached the leader waits as long as ctx allows, and when ctx's deadline
// passes a little longer (callGrace) for the leader's answer, which tells
// an appended invocation from one that may not be.
func (c *Client) Call(ctx context.Context, partitionID uint32, inv *rpc.Invoke, appendTimeout time.Duration) (*rpc.Appended, error) {
	return c.appendInvocation(ctx, opCall, partitionID, inv, time.Now().Add(appendTimeout))
}

// appendInvocation sends an append (op append) or a call (op call, with
// attach set).
func (c *Client) appendInvocation(ctx context.Context, op string, partitionID uint32, inv *rpc.Invoke, retryUntil time.Time) (*rpc.Appended, error) {
	if inv == nil {
		return nil, fmt.Errorf("%w: nil invoke", rpc.ErrInvalid)
	}
	if len(inv.RequestId) == 0 {
		inv = proto.Clone(inv).(*rpc.Invoke)
		inv.RequestId = invocation.NewRequestID()
	}
	resp, err := c.callUntil(ctx, op, &rpc.DispatchRequest{
		RequestId: inv.RequestId,
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: inv, Attach: op == opCall}},
	}, retryUntil)
	if err != nil {
		return nil, err
	}
	if a := resp.GetAppended(); a != nil {
		return a, nil
	}
	return nil, unexpected(op, resp)
}

// Output returns the invocation's result if it has one (rpc.ErrNotReady
// otherwise), read linearizably at the leader.
func (c *Client) Output(ctx context.Context, partitionID uint32, id []byte) (*rpc.InvocationResult, error) {
	resp, err := c.call(ctx, opOutput, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Output{Output: &rpc.GetOutput{InvocationId: id}},
	})
	return resultOf(opOutput, resp, err)
}

// Attach waits for the invocation's result, as long as ctx allows (no
// default timeout), across leader changes.
func (c *Client) Attach(ctx context.Context, partitionID uint32, id []byte) (*rpc.InvocationResult, error) {
	resp, err := c.call(ctx, opAttach, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Attach{Attach: &rpc.AttachInvocation{InvocationId: id}},
	})
	return resultOf(opAttach, resp, err)
}

// Status returns the invocation's stored record.
func (c *Client) Status(ctx context.Context, partitionID uint32, id []byte) (*rpc.InvocationRecord, error) {
	resp, err := c.call(ctx, opStatus, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Status{Status: &rpc.GetStatus{InvocationId: id}},
	})
	if err != nil {
		return nil, err
	}
	if s := resp.GetStatus(); s != nil && s.Record != nil {
		return s.Record, nil
	}
	return nil, unexpected(opStatus, resp)
}

// KeyStatus returns the running invocation and queue length of one key of
// a keyed service, from the leader of its partition.
func (c *Client) KeyStatus(ctx context.Context, partitionID uint32, service, key string) (*rpc.KeyState, error) {
	resp, err := c.call(ctx, opKeyStatus, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_KeyStatus{KeyStatus: &rpc.GetKeyStatus{Service: service, Key: key}},
	})
	if err != nil {
		return nil, err
	}
	if ks := resp.GetKeyState(); ks != nil {
		return ks, nil
	}
	return nil, unexpected(opKeyStatus, resp)
}

// Cancel cancels the invocation (completes it with a cancelled result
// unless it completed already).
func (c *Client) Cancel(ctx context.Context, partitionID uint32, id []byte) error {
	return c.callDone(ctx, opCancel, &rpc.DispatchRequest{
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Cancel{Cancel: &rpc.CancelInvocation{InvocationId: id}},
	})
}

// List returns one page of a partition's invocations (see
// rpc.ListInvocations), read at its leader.
func (c *Client) List(ctx context.Context, partitionID uint32, req *rpc.ListInvocations) (*rpc.InvocationList, error) {
	resp, err := c.call(ctx, opList, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_List{List: req},
	})
	if err != nil {
		return nil, err
	}
	if l := resp.GetList(); l != nil {
		return l, nil
	}
	return nil, unexpected(opList, resp)
}

// Backlog returns where a service's deliveries are in a partition (see
// rpc.ServiceBacklog), read at its leader.
func (c *Client) Backlog(ctx context.Context, partitionID uint32, service string) (*rpc.ServiceBacklog, error) {
	resp, err := c.call(ctx, opBacklog, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Backlog{Backlog: &rpc.GetBacklog{Service: service}},
	})
	if err != nil {
		return nil, err
	}
	if bl := resp.GetBacklog(); bl != nil {
		return bl, nil
	}
	return nil, unexpected(opBacklog, resp)
}

// PutService registers or updates a service (metadata group, partition 0).
func (c *Client) PutService(ctx context.Context, svc *rpc.Service) error {
	if svc == nil {
		return fmt.Errorf("%w: nil service", rpc.ErrInvalid)
	}
	return c.callDone(ctx, opPutService, &rpc.DispatchRequest{
		Body: &rpc.DispatchRequest_PutService{PutService: &rpc.PutService{Service: svc}},
	})
}

// DeleteService removes a service (metadata group, partition 0).
func (c *Client) DeleteService(ctx context.Context, name string) error {
	return c.callDone(ctx, opDeleteService, &rpc.DispatchRequest{
		Body: &rpc.DispatchRequest_DeleteService{DeleteService: &rpc.DeleteService{Name: name}},
	})
}

// PutRule stores a scope rule if its version is expected (0: new) and
// returns it as stored (metadata group); rpc.ErrConflict when another
// change came first.
func (c *Client) PutRule(ctx context.Context, rule *rpc.Rule, expected uint64) (*rpc.Rule, error) {
	resp, err := c.call(ctx, opPutRule, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Body:      &rpc.DispatchRequest_PutRule{PutRule: &rpc.PutRule{Rule: rule, ExpectedVersion: expected}},
	})
	if err != nil {
		return nil, err
	}
	if r := resp.GetRule(); r != nil {
		return r, nil
	}
	return nil, unexpected(opPutRule, resp)
}

// DeleteRule removes a scope rule if its version is expected (0: any).
func (c *Client) DeleteRule(ctx context.Context, pattern string, expected uint64) error {
	return c.callDone(ctx, opDeleteRule, &rpc.DispatchRequest{
		Body: &rpc.DispatchRequest_DeleteRule{DeleteRule: &rpc.DeleteRule{Pattern: pattern, ExpectedVersion: expected}},
	})
}

// FenceService makes a partition refuse invocations of service checked
// against a registration older than index, and returns once its leader
// applied that (rpc.FenceService). Retrying is safe.
func (c *Client) FenceService(ctx context.Context, partitionID uint32, service string, index uint64) error {
	return c.callDone(ctx, opFenceService, &rpc.DispatchRequest{
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_FenceService{FenceService: &rpc.FenceService{Name: service, Index: index}},
	})
}

// Action applies an operator's action to one invocation; restart answers
// the new invocation's id, the others nil. Retrying is safe: the request
// id is the same on every retry.
func (c *Client) Action(ctx context.Context, partitionID uint32, a *rpc.InvocationAction) (*rpc.Appended, error) {
	resp, err := c.call(ctx, opAction, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Action{Action: a},
	})
	switch {
	case err != nil:
		return nil, err
	case resp.GetAppended() != nil:
		return resp.GetAppended(), nil
	case resp.GetDone() != nil:
		return nil, nil
	}
	return nil, unexpected(opAction, resp)
}

// Bulk starts (or with req.DryRun counts) a bulk operation on one
// partition; retrying is safe (a known operation id is a no-op).
func (c *Client) Bulk(ctx context.Context, partitionID uint32, req *rpc.BulkRequest) (*rpc.Operation, error) {
	return operationOf(c.call(ctx, opBulk, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Bulk{Bulk: req},
	}))
}

// Operation reads one partition's state of a bulk operation.
func (c *Client) Operation(ctx context.Context, partitionID uint32, id string) (*rpc.Operation, error) {
	return operationOf(c.call(ctx, opOperation, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Operation{Operation: &rpc.GetOperation{OperationId: id}},
	}))
}

func operationOf(resp *rpc.DispatchResponse, err error) (*rpc.Operation, error) {
	if err != nil {
		return nil, err
	}
	if op := resp.GetOperation(); op != nil {
		return op, nil
	}
	return nil, unexpected(opOperation, resp)
}

// Schedule sends a schedule request to the partition's leader (the request
// ids of changes are inside req, the same on every retry).
func (c *Client) Schedule(ctx context.Context, partitionID uint32, req *rpc.ScheduleRequest) (*rpc.ScheduleList, error) {
	resp, err := c.call(ctx, opSchedule, &rpc.DispatchRequest{
		RequestId: invocation.NewRequestID(),
		Partition: partitionID,
		Body:      &rpc.DispatchRequest_Schedule{Schedule: req},
	})
	if err != nil {
		return nil, err
	}
	if l := resp.GetSchedules(); l != nil {
		return l, nil
	}
	return nil, unexpected(opSchedule, resp)
}

func (c *Client) callDone(ctx context.Context, op string, req *rpc.DispatchRequest) error {
	req.RequestId = invocation.NewRequestID()
	resp, err := c.call(ctx, op, req)
	if err != nil {
		return err
	}
	if resp.GetDone() == nil {
		return unexpected(op, resp)
	}
	return nil
}

func resultOf(op string, resp *rpc.DispatchResponse, err error) (*rpc.InvocationResult, error) {
	if err != nil {
		return nil, err
	}
	if r := resp.GetResult(); r != nil {
		return r, nil
	}
	return nil, unexpected(op, resp)
}

func unexpected(op string, resp *rpc.DispatchResponse) error {
	return fmt.Errorf("%w to %s: %T", errUnexpectedAnswer, op, resp.GetBody())
}
