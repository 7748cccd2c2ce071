package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/proposals"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/results"
	"github.com/raftgate/raftgate/rpc"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
)

// Processor is one partition's state machine (it implements
// raftlog.StateMachine) plus its leader-side request tracker, attach
// waiters, retention sweeper and outbox invoker. See doc.go for the order of
// events.
type Processor struct {
	cfg     Config
	logger  zerolog.Logger
	now     func() time.Time
	client  *http.Client
	machine machine
	tracker *proposals.Tracker[*rpc.Appended]
	attach  *results.Waiters
	invoker *invoker
	metrics *metrics
	flow    flowShares // adopted shares of the split limits (shares.go)

	// queue feeds the proposer loop; its capacity bounds queued commands.
	queue    chan proposal
	leaderCh chan struct{} // cap 1: leadership changed
	started  chan struct{} // closed by Start
	stop     chan struct{} // closed by Close
	wg       sync.WaitGroup

	log   Log // set once by Start, before started is closed
	depth atomic.Int64
	// appliedIndex is the last entry Apply saw; appliedCh (cap 1) wakes a
	// proposer holding a batch (cfg.InFlightBatches). Both only pace
	// batching.
	appliedIndex atomic.Uint64
	appliedCh    chan struct{}
	// appliedTerm is the term of the last entry Apply saw (before its
	// transaction commits), for the sweeper's retention clock.
	appliedTerm atomic.Uint64
	// sweepCh (cap 1) wakes the sweeper when a Purge stopped at its limit.
	sweepCh chan struct{}
	// bulkCh (cap 1) wakes the bulk loop when a bulk step or Bulk applied
	// that left an operation running.
	bulkCh chan struct{}
	// scheduleCh (cap 1) wakes the scheduler when a schedule command
	// applies.
	scheduleCh chan struct{}
	// dispatchCh (cap 1) wakes the dispatch of keyed schedule runs
	// (scheduledispatch.go) when a schedule command applies.
	dispatchCh chan struct{}
	// callbacks delivers completion callbacks (callbacks.go).
	callbacks *callbacks
	// restores counts Restore calls; Apply, Restore and reveal all run on
	// raftlog's writer goroutine (Restore at open before the group starts),
	// so it needs no lock.
	restores  uint64
	startOnce sync.Once
	closeOnce sync.Once
}

// proposal is one command waiting for the proposer loop. Tracked commands
// carry the ticket of their waiter; untracked ones (invoker, sweeper) may
// carry done, called with the outcome of their Propose.
type proposal struct {
	cmd  *rpc.Command
	tk   proposals.Ticket[*rpc.Appended]
	done func(error)
}

// New returns a processor for cfg.Partition. Hand it to raftlog's AddGroup,
// then call Start with the returned group.
func New(cfg Config) (*Processor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Processor{
		cfg:        cfg,
		logger:     cfg.Logger.With().Str("component", "partition").Uint32("partition", cfg.Partition).Logger(),
		now:        cfg.Clock,
		client:     cfg.HTTPClient,
		tracker:    proposals.NewTracker[*rpc.Appended](cfg.MaxPending),
		attach:     results.NewWaiters(cfg.MaxAttachWaiters),
		queue:      make(chan proposal, cfg.MaxPending),
		leaderCh:   make(chan struct{}, 1),
		started:    make(chan struct{}),
		stop:       make(chan struct{}),
		appliedCh:  make(chan struct{}, 1),
		sweepCh:    make(chan struct{}, 1),
		bulkCh:     make(chan struct{}, 1),
		scheduleCh: make(chan struct{}, 1),
		dispatchCh: make(chan struct{}, 1),
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.client == nil {
		p.client = &http.Client{Transport: &http.Transport{
			MaxIdleConns:        cfg.Invoker.Concurrency,
			MaxIdleConnsPerHost: cfg.Invoker.Concurrency,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	p.invoker = newInvoker(p)
	p.callbacks = newCallbacks(p)
	m, err := newMetrics(cfg.Registerer, cfg.Partition, p)
	if err != nil {
		return nil, err
	}
	p.metrics = m
	return p, nil
}

// Start begins the processor's loops over log (the group AddGroup
// returned). Call once.
func (p *Processor) Start(log Log) {
	p.startOnce.Do(func() {
		p.log = log
		if _, _, term := p.tracker.Leadership(); term == 0 {
			// No leadership event yet: start from what the group knows.
			st := log.Status()
			p.tracker.SetLeadership(st.Leader, st.Term, st.IsLeader)
		}
		close(p.started)
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.proposeLoop() }()
		go func() { defer p.wg.Done(); p.leaderLoop() }()
		p.signalLeadership()
	})
}

// OnLeadership records a leadership change of this partition's group. Any
// loss of leadership fails every pending request and attach waiter at once
// with rpc.ErrLostLeadership. Never blocks.
func (p *Processor) OnLeadership(ev raftlog.LeaderEvent) {
	if uint32(ev.Group) != p.cfg.Partition {
		return
	}
	if p.tracker.SetLeadership(ev.Leader, ev.Term, ev.IsSelf) {
		p.attach.FailAll(rpc.ErrLostLeadership)
	}
	p.signalLeadership()
}

func (p *Processor) signalLeadership() {
	select {
	case p.leaderCh <- struct{}{}:
	default:
	}
}

// Append proposes inv and returns once its entry applied in this leader's
// term. inv.InvocationId (24 bytes) and inv.RequestId (the same on every
// retry) are chosen by the caller; the processor stamps the proposal time.
// A retry while the first attempt is pending takes over its reply.
func (p *Processor) Append(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
	if err := validateInvoke(inv); err != nil {
		return nil, err
	}
	return p.request(ctx, inv.RequestId, stampedInvokeCmd(inv, p.now().UnixMilli()))
}

// Cancel completes a pending invocation with a cancelled result (status
// 409, failed). Cancelling a completed invocation does nothing;
// rpc.ErrNotFound for an unknown or purged one.
func (p *Processor) Cancel(ctx context.Context, requestID, id []byte) error {
	if len(id) != invocation.IDLen || len(requestID) == 0 || len(requestID) > maxRequestIDLen {
		return fmt.Errorf("partition: cancel: malformed id: %w", rpc.ErrInvalid)
	}
	_, err := p.request(ctx, requestID, cancelCmd(&rpc.Cancel{InvocationId: id, RequestId: requestID, ProposedAtUnixMs: p.now().UnixMilli(),
		AttemptUnderWay: p.invoker.isDelivering(id)}))
	return err
}

// request registers a waiter for requestID, proposes cmd (unless a pending
// attempt of the same request is taken over) and waits for its reply.
func (p *Processor) request(ctx context.Context, requestID []byte, cmd *rpc.Command) (*rpc.Appended, error) {
	if !p.isStarted() {
		return nil, p.tracker.NotLeader()
	}
	tk, propose, err := p.tracker.Register(string(requestID))
	if err != nil {
		return nil, err
	}
	if propose {
		select {
		case p.queue <- proposal{cmd: cmd, tk: tk}:
		default:
			err := fmt.Errorf("partition: proposal queue full: %w", rpc.ErrOverloaded)
			p.tracker.Fail([]proposals.Ticket[*rpc.Appended]{tk}, err)
		}
	}
	select {
	case r := <-tk.C:
		return r.Value, r.Err
	case <-ctx.Done():
		p.tracker.Forget(tk)
		select {
		case r := <-tk.C: // answered meanwhile
			return r.Value, r.Err
		default:
			return nil, ctx.Err()
		}
	}
}

// Output returns the invocation's result: linearizable (leader, after a
// ReadIndex). rpc.ErrNotReady while it has none, rpc.ErrNotFound when the
// id is unknown or its result was purged.
func (p *Processor) Output(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
	if err := p.readBarrier(ctx, id); err != nil {
		return nil, err
	}
	return p.readResult(ctx, id)
}

// Attach waits until the invocation has a result, ctx ends or this node
// loses leadership (rpc.ErrLostLeadership).
func (p *Processor) Attach(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
	leading, _, term := p.tracker.Leadership()
	if !leading || !p.isStarted() {
		return nil, p.tracker.NotLeader()
	}
	wt, err := p.attach.Add(id)
	if err != nil {
		return nil, err
	}
	defer p.attach.Remove(wt)
	// Registered first, so a Complete applied from here on wakes us; a
	// leadership change from here on fails us. One before is seen here.
	if leadingNow, _, termNow := p.tracker.Leadership(); !leadingNow || termNow != term {
		return nil, rpc.ErrLostLeadership
	}
	res, err := p.Output(ctx, id)
	var nl *rpc.NotLeaderError
	switch {
	case errors.As(err, &nl):
		// We led when the attach began: leadership was lost meanwhile.
		return nil, fmt.Errorf("partition: attach: %w", rpc.ErrLostLeadership)
	case !errors.Is(err, rpc.ErrNotReady):
		return res, err
	}
	return p.attach.Wait(ctx, wt)
}

// Call is Append followed by a wait for the result, in one request: the
// answer carries the result (Appended.Result) once the invocation has one.
// The attach waiter is registered before the proposal, so a completion
// applied after the invocation's entry wakes it, and one applied before
// shows in the reply (CompletedAtUnixMs); so no ReadIndex round is needed
// but for the rare resubmit of an invocation that had completed. When the
// wait ends without a result (leadership lost, ctx ended) the answer is the
// Appended alone: the invocation was accepted, and the caller attaches to
// it by id.
func (p *Processor) Call(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
	if err := validateInvoke(inv); err != nil {
		return nil, err
	}
	leading, _, term := p.tracker.Leadership()
	if !leading || !p.isStarted() {
		return nil, p.tracker.NotLeader()
	}
	id := inv.InvocationId
	wt, err := p.attach.Add(id)
	if err != nil {
		return nil, err
	}
	defer p.attach.Remove(wt)
	// From here on a leadership change fails wt; one before is seen here.
	if leadingNow, _, termNow := p.tracker.Leadership(); !leadingNow || termNow != term {
		return nil, p.tracker.NotLeader()
	}
	a, err := p.request(ctx, inv.RequestId, stampedInvokeCmd(inv, p.now().UnixMilli()))
	if err != nil {
		return nil, err
	}
	// a is this caller's own reply (the tracker hands it to one waiter).
	if a.GetCompletedAtUnixMs() > 0 {
		if res, err := p.Output(ctx, id); err == nil {
			a.Result = res
		}
		return a, nil
	}
	if res, err := p.attach.Wait(ctx, wt); err == nil {
		a.Result = res
	}
	return a, nil
}

// Status returns the invocation's record, its result included when
// completed; linearizable like Output. State is RUNNING while the leader is
// delivering it; a QUEUED one carries its queue position.
func (p *Processor) Status(ctx context.Context, id []byte) (*rpc.InvocationRecord, error) {
	if err := p.readBarrier(ctx, id); err != nil {
		return nil, err
	}
	var rec *rpc.InvocationRecord
	err := p.log.View(ctx, func(b *bolt.Bucket) error {
		r, res, err := readInvocation(b, id)
		if r != nil && r.State == rpc.InvocationRecord_QUEUED {
			r.QueuePosition = queuePosition(b, r)
		}
		if r != nil && res != nil {
			r.Result = res.Result
		}
		rec = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("partition: status: %w", err)
	}
	if rec == nil {
		return nil, fmt.Errorf("partition: status: %w", rpc.ErrNotFound)
	}
	showLive(rec, p.invoker)
	return rec, nil
}

// readInvocation reads id's record (nil if there is none) and, once it is
// completed, its result (nil if purged): through the record, which holds
// the completion time the result is keyed by.
func readInvocation(b *bolt.Bucket, id []byte) (*rpc.InvocationRecord, *rpc.InvocationResult, error) {
	rec, found, err := getRecord(b, id)
	if err != nil || !found || rec.State != rpc.InvocationRecord_COMPLETED {
		return rec, nil, err
	}
	res, _, err := results.Get(b, rec.CompletedAtUnixMs, id)
	return rec, res, err
}

// OutboxDepth returns the number of deliveries queued in this replica's
// outbox (as of the last Reveal).
func (p *Processor) OutboxDepth() int { return int(p.depth.Load()) }

// Close fails every pending request and attach waiter with
// rpc.ErrLostLeadership, stops the loops and waits for them. It does not
// close the Log (raftlog owns it).
func (p *Processor) Close() error {
	p.closeOnce.Do(func() {
		p.tracker.Close()
		p.attach.FailAll(rpc.ErrLostLeadership)
		close(p.stop)
		p.wg.Wait()
		p.client.CloseIdleConnections()
	})
	return nil
}

// Apply implements raftlog.StateMachine. It is deterministic (see
// machine). Replies to proposers go out from Acknowledge (their entries
// are committed on a quorum; each reply carries only its command's own
// outcome); results, attach waiters and the invoker learn of the effects
// only from Reveal, once a View would find them.
func (p *Processor) Apply(b *bolt.Bucket, entries []raftlog.Entry) (raftlog.Applied, error) {
	fx, err := p.machine.apply(b, entries)
	if err != nil {
		p.logger.Error().Err(err).Msg("apply failed; the group stops")
		return raftlog.Applied{}, fmt.Errorf("partition %d: %w", p.cfg.Partition, err)
	}
	if len(entries) > 0 {
		p.appliedIndex.Store(entries[len(entries)-1].Index)
		p.appliedTerm.Store(entries[len(entries)-1].Term)
		select {
		case p.appliedCh <- struct{}{}:
		default:
		}
	}
	gen := p.restores
	return raftlog.Applied{
		Acknowledge: func() { p.acknowledge(fx) },
		Reveal:      func() { p.reveal(fx, gen) },
	}, nil
}

// Restore implements raftlog.StateMachine: it drops the machine's record
// cache, rebuilds the in-memory outbox counter from b and makes the invoker
// rescan the whole outbox.
func (p *Processor) Restore(b *bolt.Bucket) error {
	p.machine.restored()
	if err := checkFormat(b); err != nil {
		return err
	}
	// The count read here already includes every Apply before it, also
	// those whose reveal runs later (after a snapshot install): their
	// deltas must not be added again.
	p.restores++
	p.depth.Store(int64(outbox.Count(b)))
	if err := p.flow.load(b); err != nil {
		return err
	}
	p.invoker.rescan()
	return nil
}

// acknowledge answers the proposers of fx's commands.
func (p *Processor) acknowledge(fx *effects) {
	for _, r := range fx.replies {
		p.tracker.Resolve(r.requestID, r.term, proposals.Reply[*rpc.Appended]{Value: r.appended, Err: r.err})
	}
}

// reveal publishes the rest of fx; gen is the Restore generation its Apply
// ran in.
func (p *Processor) reveal(fx *effects, gen uint64) {
	for _, res := range fx.completed {
		p.attach.Complete(res)
	}
	if gen == p.restores {
		p.depth.Add(int64(fx.outboxDelta))
	}
	p.invoker.startsApplied(fx.started)
	if p.flow.applied(fx.adopted) {
		p.invoker.kick() // a raised share admits more, a lowered one is reported
	}
	p.invoker.applied(fx.outboxDone, fx.outboxAdded, fx.firstQueued)
	p.callbacks.applied(fx.callbacksDone, fx.callbacksQueued)
	p.metrics.applied(fx)
	if fx.schedulesChanged {
		p.wakeScheduler()
	}
	if fx.purgeFull {
		select {
		case p.sweepCh <- struct{}{}:
		default:
		}
	}
	if fx.bulkActive {
		select {
		case p.bulkCh <- struct{}{}:
		default:
		}
	}
}

func (p *Processor) isStarted() bool {
	select {
	case <-p.started:
		return true
	default:
		return false
	}
}

// readBarrier checks leadership and waits for a ReadIndex.
func (p *Processor) readBarrier(ctx context.Context, id []byte) error {
	if len(id) != invocation.IDLen {
		return fmt.Errorf("partition: malformed id: %w", rpc.ErrInvalid)
	}
	return p.leaderRead(ctx)
}

// leaderRead checks leadership and waits for a ReadIndex, so that a View
// after it sees everything committed before the call.
func (p *Processor) leaderRead(ctx context.Context) error {
	if leading, _, _ := p.tracker.Leadership(); !leading || !p.isStarted() {
		return p.tracker.NotLeader()
	}
	if err := p.log.ReadIndex(ctx); err != nil {
		return p.mapLogError(err)
	}
	return nil
}

// readResult reads the invocation's result from this replica's applied
// state: rpc.ErrNotFound for an unknown id or a purged result,
// rpc.ErrNotReady while it has none.
func (p *Processor) readResult(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
	var res *rpc.InvocationResult
	err := p.log.View(ctx, func(b *bolt.Bucket) error {
		rec, r, err := readInvocation(b, id)
		switch {
		case err != nil:
			return err
		case rec == nil:
			return rpc.ErrNotFound
		case rec.State != rpc.InvocationRecord_COMPLETED:
			return rpc.ErrNotReady
		case r == nil:
			return rpc.ErrNotFound
		}
		res = r
		return nil
	})
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, rpc.ErrNotReady), errors.Is(err, rpc.ErrNotFound):
		// Answers, not failures: an attach mostly finds its result not
		// ready, and wrapping that was about 1% of a call's CPU.
		return nil, err
	}
	return nil, fmt.Errorf("partition: output: %w", err)
}

// mapLogError turns raftlog's errors into the dispatch errors callers
// branch on. Nothing was proposed for any of them but a context error.
func (p *Processor) mapLogError(err error) error {
	var nl *raftlog.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return &rpc.NotLeaderError{Leader: nl.Leader, Term: nl.Term}
	case errors.Is(err, raftlog.ErrProposalDropped):
		// A leader mid-transfer or with a full uncommitted log.
		st := p.log.Status()
		return &rpc.NotLeaderError{Leader: st.Leader, Term: st.Term}
	case errors.Is(err, raftlog.ErrStopped):
		_, _, term := p.tracker.Leadership()
		return &rpc.NotLeaderError{Term: term}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return fmt.Errorf("partition %d: %w", p.cfg.Partition, err)
	}
}

// maxRequestIDLen bounds request ids (16 bytes from invocation.NewRequestID).
const maxRequestIDLen = 64

func validateInvoke(inv *rpc.Invoke) error {
	switch {
	case inv == nil:
		return fmt.Errorf("partition: nil invoke: %w", rpc.ErrInvalid)
	case len(inv.InvocationId) != invocation.IDLen:
		return fmt.Errorf("partition: invocation id has %d bytes, want %d: %w", len(inv.InvocationId), invocation.IDLen, rpc.ErrInvalid)
	case len(inv.RequestId) == 0 || len(inv.RequestId) > maxRequestIDLen:
		return fmt.Errorf("partition: request id has %d bytes: %w", len(inv.RequestId), rpc.ErrInvalid)
	case inv.Service == "" || inv.Handler == "":
		return fmt.Errorf("partition: service and handler are required: %w", rpc.ErrInvalid)
	case inv.GetDelayMs() < 0:
		return fmt.Errorf("partition: negative delay: %w", rpc.ErrInvalid)
	case inv.Exclusive && inv.Key == "":
		return fmt.Errorf("partition: an exclusive invocation needs a key: %w", rpc.ErrInvalid)
	case inv.Key != "" && binary.BigEndian.Uint64(inv.InvocationId) != invocation.KeyedPartitionKey(inv.Service, inv.Key):
		// Its key's queue is in the partition of (service, key).
		return fmt.Errorf("partition: the id of an invocation of key %q has another partition key than the key: %w", inv.Key, rpc.ErrInvalid)
	}
	return nil
}
