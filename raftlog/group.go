package raftlog

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
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// ErrEmptyProposal: Propose was given no data (empty entries are raft's
// no-ops and are never handed to Apply).
var ErrEmptyProposal = errors.New("raftlog: empty proposal")

// maxInboxMessages bounds the raft messages queued for one group; beyond it
// incoming messages are dropped (raft retransmits).
const maxInboxMessages = 16384

// Group is one Raft group on this node. Its methods are safe for
// concurrent use.
//
// One goroutine (run, in loop.go) owns the RawNode, the logStore and every
// field marked "loop-owned"; other goroutines reach it only through the
// inbox, whose items carry their own reply channels.
type Group struct {
	id GroupID
	n  *Node
	sm StateMachine
	// self is this node's replica id in the group (ReplicaID).
	self uint64
	log  zerolog.Logger
	// conf is the configuration applied on this replica (a snapshot
	// install or a configuration change replaces it; read lock-free by
	// deliver and Status).
	conf atomic.Pointer[Membership]
	// removedc is closed once this replica knows it was removed.
	removedc chan struct{}

	// mu guards in (the inbox) and changed.
	mu sync.Mutex
	in inbox
	// spare is the loop's emptied previous inbox (loop-owned).
	spare inbox
	// changed is closed and replaced on every leadership change.
	changed chan struct{}

	wake     chan struct{}
	stopc    chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	// stepStopOnce ends a stepped group (Knobs.Stepped), which has no
	// loop to close done.
	stepStopOnce sync.Once

	// leader is the latest LeaderEvent, published for lock-free reads.
	leader atomic.Pointer[LeaderEvent]
	// applied is the applied index (checkpointed or not: readers see the
	// applier's open transaction), published for Status.
	applied atomic.Uint64

	// Loop-owned.
	rn    *raft.RawNode
	store *logStore
	// warnedCommit: a heartbeat past the log was already logged once.
	warnedCommit bool
	// lastAppended is the index of the last entry handed to the writer:
	// raft's last index, which the store learns only once it is durable.
	lastAppended uint64
	// pastLogBeats counts consecutive heartbeats of the leader that
	// committed past the log (see checkHeartbeatCommit).
	pastLogBeats int
	isLeader     bool
	accepted     []*proposal
	readSeq      uint64
	readIssued   map[uint64]*readBatch
	readAwait    []*readBatch
	// checkpoint is the applied index durable in state.db; lastCompact
	// when the compaction point last moved.
	checkpoint  uint64
	lastCompact time.Time
	appliedGge  prometheus.Gauge
	outBuf      []*pb.Message
	propBuf     []*pb.Entry
	// snapFiles are spooled snapshots stepped into raft this iteration;
	// those raft did not take are deleted after the next Ready.
	snapFiles    []string
	keepSnapshot string

	// ticks counts the ticks this loop handled; heard is, per peer, the
	// value of ticks when this node, leading, last saw the peer recently
	// active (noteActive).
	ticks uint64
	heard map[uint64]uint64

	// preferred is PreferredLeader of the group (0: balancing off);
	// balanceTicks counts ticks since the last leadership change or check,
	// balanceBackoff the hand-offs that did not hold (balance.go).
	preferred      uint64
	balanceTicks   int
	balanceBackoff int
	// preferredNode is the node the application prefers as leader
	// (SetPreferredLeader; 0: PreferredLeader's choice).
	preferredNode atomic.Uint64

	// confWaits are the configuration changes this node proposed, by log
	// index, waiting for their outcome in the applier (membership.go).
	confWaits map[uint64]*confWait

	// Applier-owned scratch for Apply batches.
	applyBuf []Entry
}

type inbox struct {
	appended    []*appendReq
	applied     []*applyReq
	checkpoints []checkpoint
	failure     error
	ticks       int
	msgs        []*pb.Message
	snaps       []spooledSnapshot
	reports     []func()
	control     []func()
	reads       []*readWaiter
	props       []*proposal
	confs       []*confProposal
}

// reset empties the inbox for reuse, dropping references it held.
func (in inbox) reset() inbox {
	clear(in.appended)
	clear(in.applied)
	clear(in.msgs)
	clear(in.snaps)
	clear(in.reports)
	clear(in.control)
	clear(in.reads)
	clear(in.props)
	clear(in.confs)
	return inbox{
		appended: in.appended[:0], applied: in.applied[:0], checkpoints: in.checkpoints[:0],
		msgs: in.msgs[:0], snaps: in.snaps[:0], reports: in.reports[:0],
		control: in.control[:0], reads: in.reads[:0], props: in.props[:0], confs: in.confs[:0],
	}
}

type proposal struct {
	ctx   context.Context
	data  []byte
	reply chan proposeResult
	// conf: a configuration change (membership.go), whose outcome conf
	// waits for once accepted.
	conf *confWait
}

type proposeResult struct {
	p   Proposal
	err error
}

type readWaiter struct {
	reply chan error
	// anyReplica: a CatchUp, which a follower forwards to its leader; a
	// ReadIndex is served by the leader only.
	anyReplica bool
}

type readBatch struct {
	waiters []*readWaiter
	index   uint64
}

func newGroup(n *Node, id GroupID, gs groupState, store *logStore, sm StateMachine) (*Group, error) {
	g := &Group{
		id: id, n: n, sm: sm, self: gs.replica,
		log:         n.log.With().Uint32("group", uint32(id)).Logger(),
		removedc:    make(chan struct{}),
		confWaits:   make(map[uint64]*confWait),
		changed:     make(chan struct{}),
		wake:        make(chan struct{}, 1),
		stopc:       make(chan struct{}),
		done:        make(chan struct{}),
		readIssued:  make(map[uint64]*readBatch),
		appliedGge:  n.metrics.appliedGauge(id),
		store:       store,
		checkpoint:  gs.appliedIdx,
		lastCompact: n.cfg.Knobs.now(),
	}
	g.setConf(gs.conf)
	g.applied.Store(gs.appliedIdx)
	g.appliedGge.Set(float64(gs.appliedIdx))
	rn, err := raft.NewRawNode(n.cfg.raftConfig(g.self, g.store, gs.appliedIdx, newRaftLogger(n.cfg, id)))
	if err != nil {
		return nil, fmt.Errorf("raftlog: group %d: %w", id, err)
	}
	g.rn = rn
	g.leader.Store(&LeaderEvent{Group: id, Term: store.hard.GetTerm()})
	if voters := gs.conf.GetVoters(); len(voters) == 1 && voters[0] == g.self && len(gs.conf.GetVotersOutgoing()) == 0 {
		// A lone voter need not wait an election timeout, nor a tick: the
		// loop handles the campaign's Ready as soon as it starts.
		if err := rn.Campaign(); err != nil {
			return nil, fmt.Errorf("raftlog: group %d: campaign: %w", id, err)
		}
		g.wake <- struct{}{}
	}
	return g, nil
}

// ID returns the group's id.
func (g *Group) ID() GroupID { return g.id }

// Propose appends data to the log if this node leads the group, and returns
// where it was appended as soon as raft accepted it (not when it commits:
// the state machine sees it in Apply). Fails at once with *NotLeaderError,
// ErrProposalDropped or ErrStopped; never hangs past ctx.
func (g *Group) Propose(ctx context.Context, data []byte) (Proposal, error) {
	if err := ctx.Err(); err != nil {
		return Proposal{}, err
	}
	if len(data) == 0 {
		// Empty entries are raft's own no-ops and never reach Apply.
		return Proposal{}, ErrEmptyProposal
	}
	select {
	case <-g.stopc: // stopped (closed, or failed): say so, not "not leader"
		return Proposal{}, ErrStopped
	default:
	}
	if ev := g.leader.Load(); !ev.IsSelf {
		g.n.metrics.proposalErrors.Inc()
		return Proposal{}, &NotLeaderError{Group: g.id, Leader: ev.Leader, Term: ev.Term}
	}
	p := &proposal{ctx: ctx, data: data, reply: make(chan proposeResult, 1)}
	if !g.enqueue(func(in *inbox) { in.props = append(in.props, p) }) {
		return Proposal{}, ErrStopped
	}
	g.iterateIfStepped()
	select {
	case r := <-p.reply:
		return r.p, r.err
	case <-ctx.Done():
		return Proposal{}, ctx.Err()
	case <-g.done:
		return Proposal{}, ErrStopped
	}
}

// ReadIndex is a linearizable read barrier: it returns nil once this node,
// still the leader, has applied everything committed before the call.
// Concurrent calls are batched into one raft ReadIndex round. It fails with
// *NotLeaderError when this node does not lead the group or loses the
// leadership before the read index is confirmed.
func (g *Group) ReadIndex(ctx context.Context) error {
	if ev := g.leader.Load(); !ev.IsSelf && ctx.Err() == nil {
		return &NotLeaderError{Group: g.id, Leader: ev.Leader, Term: ev.Term}
	}
	return g.read(ctx, false)
}

// CatchUp returns once this replica has applied everything the group's
// leader had committed when the call was made, on a follower as on the
// leader (raft's ReadIndex, which a follower forwards to its leader). It
// fails with *NotLeaderError when no leader is known or the leader changes
// before the read index is confirmed, and with ctx's error when the leader
// does not answer in time (a message can be lost: bound ctx).
func (g *Group) CatchUp(ctx context.Context) error {
	return g.read(ctx, true)
}

// read queues a read barrier on the group's loop and waits for its answer.
func (g *Group) read(ctx context.Context, anyReplica bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := &readWaiter{reply: make(chan error, 1), anyReplica: anyReplica}
	if !g.enqueue(func(in *inbox) { in.reads = append(in.reads, w) }) {
		return ErrStopped
	}
	select {
	case err := <-w.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-g.done:
		return ErrStopped
	}
}

// View runs fn over the group's state bucket, on the applier, inside its
// open transaction: fn sees every entry applied so far (checkpointed or
// not), so a read after a ReadIndex or an acknowledgement sees what was
// acknowledged. Every group's applies wait while fn runs: keep it short
// (a point read, a bounded scan) and use ViewCheckpoint for long reads.
// fn must not block or keep references to bucket memory, and View must not
// be called from Apply, Acknowledge or Reveal (they run on the applier,
// which would wait for itself). When ctx ends before the applier reached
// the read, fn does not run and View returns ctx's error; once fn runs,
// View waits for it.
func (g *Group) View(ctx context.Context, fn func(b *bolt.Bucket) error) error {
	select {
	case <-g.done:
		return ErrStopped
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &applyReq{g: g, view: fn, done: make(chan struct{})}
	if !g.n.ap.submit(r) {
		return ErrStopped
	}
	g.n.ap.runIfStepped()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		if r.viewClaim.CompareAndSwap(viewQueued, viewAbandoned) {
			return ctx.Err() // the applier will pass it over
		}
		<-r.done // fn runs: its caller's variables are in use until it ends
		return r.err
	}
}

// ViewCheckpoint runs fn over the group's state bucket on the caller's
// goroutine, in a bbolt read transaction of its own, beside the applier:
// every group's applies go on while fn runs, however long. It first has
// the applier checkpoint what it applied so far (at most one commit, and
// none when nothing is pending), so fn sees everything applied before the
// call, acknowledged entries included (read-your-writes), but nothing
// applied while it runs. The read transaction keeps the pages it sees from
// reuse until fn returns, so a long read lets state.db grow meanwhile (as
// a backup does). fn must not keep references to bucket memory.
func (g *Group) ViewCheckpoint(ctx context.Context, fn func(b *bolt.Bucket) error) error {
	select {
	case <-g.done:
		return ErrStopped
	default:
	}
	if err := g.n.checkpointNow(ctx); err != nil {
		return err
	}
	return g.n.db.View(func(tx *bolt.Tx) error {
		if g.stopped() {
			return ErrStopped // a removed group's buckets may be gone
		}
		gb, err := openGroupBuckets(tx, g.id)
		if err != nil {
			return err
		}
		return fn(gb.state)
	})
}

// Status returns the group's current state on this node. Once the group has
// stopped it reports the last known leader and applied index.
func (g *Group) Status() Status {
	var st Status
	err := g.call(context.Background(), func() {
		rs := g.rn.Status()
		conf := *g.conf.Load()
		st = Status{
			Group:      g.id,
			Leader:     NodeOf(rs.Lead),
			Term:       rs.GetTerm(),
			IsLeader:   rs.RaftState == raft.StateLeader,
			Applied:    g.applied.Load(),
			Committed:  rs.GetCommit(),
			Voters:     conf.voterNodes(),
			Replica:    g.self,
			Membership: conf,
		}
		if st.IsLeader {
			st.Match = make(map[uint64]uint64, len(rs.Progress))
			st.Active = make(map[uint64]bool, len(rs.Progress))
			for id, pr := range rs.Progress {
				st.Match[NodeOf(id)] = pr.Match
				st.Active[NodeOf(id)] = id == g.self || pr.RecentActive || g.heardRecently(id)
			}
		}
	})
	if err != nil {
		ev := g.leader.Load()
		conf := *g.conf.Load()
		return Status{Group: g.id, Leader: ev.Leader, Term: ev.Term, Applied: g.applied.Load(), Voters: conf.voterNodes(), Replica: g.self, Membership: conf}
	}
	return st
}

// noteActive runs on the loop before the iteration's ticks are handed to
// raft. With CheckQuorum the leader clears every peer's RecentActive flag
// on the tick that ends an election timeout, and a live peer's next
// heartbeat response sets it again; so the flags are sampled before each
// batch of ticks and the last tick each peer was seen active is kept, so
// that Status does not call a live peer silent in the moment after a clear.
func (g *Group) noteActive(ticks int) {
	g.ticks += uint64(ticks)
	if ticks == 0 || !g.isLeader {
		return
	}
	if g.heard == nil {
		g.heard = map[uint64]uint64{}
	}
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.RecentActive {
			g.heard[id] = g.ticks
		}
	})
}

// heardRecently: this node, leading, saw peer active within the last two
// election timeouts (one full CheckQuorum window, and a margin for a
// late loop).
func (g *Group) heardRecently(peer uint64) bool {
	at, ok := g.heard[peer]
	return ok && g.ticks-at <= 2*uint64(g.n.cfg.ElectionTicks)
}

// TransferLeadership asks raft to hand leadership to the voter on node
// to and returns when another node leads or ctx ends.
func (g *Group) TransferLeadership(ctx context.Context, to uint64) error {
	conf := g.conf.Load()
	replica := conf.Replica(to)
	if to == g.n.cfg.NodeID || !slices.Contains(conf.Voters, replica) {
		return fmt.Errorf("raftlog: group %d: transfer target %d is not another voter", g.id, to)
	}
	retry := time.Duration(g.n.cfg.ElectionTicks) * g.n.cfg.TickInterval
	timer := time.NewTimer(retry)
	defer timer.Stop()
	for {
		g.mu.Lock()
		changed := g.changed
		g.mu.Unlock()
		if ev := g.leader.Load(); ev.Leader != 0 && !ev.IsSelf {
			return nil
		}
		if !g.enqueueControl(func() { g.rn.TransferLeader(replica) }) {
			return ErrStopped
		}
		timer.Reset(retry)
		select {
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-g.done:
			return ErrStopped
		}
	}
}

// transferTarget picks the node of the (incoming) voter with the most
// log acknowledged.
func (g *Group) transferTarget() uint64 {
	st := g.Status()
	var best, bestMatch uint64
	for _, v := range st.Voters {
		if v == g.n.cfg.NodeID {
			continue
		}
		if m := st.Match[v]; best == 0 || m > bestMatch {
			best, bestMatch = v, m
		}
	}
	return best
}

func (g *Group) leaderEvent() LeaderEvent { return *g.leader.Load() }

// enqueue adds work to the inbox and wakes the loop; false once stopped.
func (g *Group) enqueue(fn func(*inbox)) bool {
	select {
	case <-g.stopc:
		return false
	default:
	}
	g.mu.Lock()
	fn(&g.in)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return true
}

func (g *Group) enqueueControl(fn func()) bool {
	return g.enqueue(func(in *inbox) { in.control = append(in.control, fn) })
}

func (g *Group) enqueueReport(fn func()) {
	g.enqueue(func(in *inbox) { in.reports = append(in.reports, fn) })
}

func (g *Group) enqueueMessage(m *pb.Message) bool {
	ok := true
	queued := g.enqueue(func(in *inbox) {
		if len(in.msgs) >= maxInboxMessages {
			ok = false
			return
		}
		in.msgs = append(in.msgs, m)
	})
	return ok && queued
}

// spooledSnapshot is a MsgSnap received on the Snapshot RPC and the spool
// file its state was written to. The path is this node's own: it never
// comes from the wire (a MsgSnap's Data is overwritten with it).
type spooledSnapshot struct {
	msg  *pb.Message
	path string
}

func (g *Group) enqueueSnapshot(m *pb.Message, path string) bool {
	return g.enqueue(func(in *inbox) { in.snaps = append(in.snaps, spooledSnapshot{msg: m, path: path}) })
}

func (g *Group) addTick() { g.enqueue(func(in *inbox) { in.ticks++ }) }

// appendDone is called by the log writer once r is durable (or failed).
func (g *Group) appendDone(r *appendReq) {
	g.enqueueDone(func(in *inbox) { in.appended = append(in.appended, r) })
}

// appliedDone is called by the applier once r is applied (or failed).
func (g *Group) appliedDone(r *applyReq) {
	g.enqueueDone(func(in *inbox) { in.applied = append(in.applied, r) })
}

// checkpointed is called by the applier once the group's state up to cp
// is durable in state.db.
func (g *Group) checkpointed(cp checkpoint) {
	g.enqueueDone(func(in *inbox) { in.checkpoints = append(in.checkpoints, cp) })
}

// checkpointFailed is called by the applier when a checkpoint holding the
// group's applies failed: the group stops.
func (g *Group) checkpointFailed(err error) {
	g.enqueueDone(func(in *inbox) {
		if in.failure == nil {
			in.failure = err
		}
	})
}

// enqueueDone adds a writer's hand-back to the inbox, even while the group
// stops (nothing is lost by adding to an inbox nobody reads).
func (g *Group) enqueueDone(fn func(*inbox)) {
	g.mu.Lock()
	fn(&g.in)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// call runs fn on the loop and waits for it.
func (g *Group) call(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	if !g.enqueueControl(func() { fn(); close(done) }) {
		return ErrStopped
	}
	g.iterateIfStepped()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.done:
		return ErrStopped
	}
}

// stopped says whether the group's loop has ended.
func (g *Group) stopped() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

func (g *Group) stop() {
	g.stopOnce.Do(func() { close(g.stopc) })
	if g.n.cfg.Knobs.stepped() {
		g.stepStopOnce.Do(func() {
			g.failPending(ErrStopped)
			close(g.done)
		})
	}
	<-g.done
}
