package raftlog

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// writeReq is one group's share of a write transaction: the raft
// MsgStorageAppend (entries, hard state, snapshot) and/or MsgStorageApply
// (committed entries) of one Ready, or a log compaction. The writer fills the
// result fields; the group's loop reads them after the transaction is
// durable (the done hand-off orders the two).
type writeReq struct {
	g       *Group
	append  *pb.Message
	apply   *pb.Message
	compact *compaction
	// lazy requests promise nothing anyone waits for soon (a commit-index-
	// only hard state): they ride along with the next urgent commit or go
	// after lazyDelay, saving fsyncs.
	lazy bool
	// deferred requests (a follower's apply, a compaction) are not even
	// needed soon: they are held back from urgent commits, whose fsyncs
	// are on every acknowledgement's path, and go together after
	// deferDelay (or deferBytes). Their state pages are then written once
	// for many entries instead of once per urgent commit.
	deferred bool
	queuedAt time.Time
	// applyBytes: data bytes of the entries to apply (deferral budget).
	applyBytes int
	// leaderAppend: a leader's new entries (an apply will follow soon);
	// leaderApply: a leader's apply (proposers wait on it).
	leaderAppend, leaderApply bool

	// Results.
	onAck      []func() // Applied.Acknowledge, run before the commit
	onDurable  []func() // Applied.Reveal, run after it
	appliedIdx uint64
	appliedTrm uint64
	applyCount int
	err        error
	// applyCalled: Apply ran in the current transaction (so a retry after a
	// rollback must Restore first).
	applyCalled bool
}

type compaction struct {
	index, term uint64
	more        bool // set by the writer: entries <= index remain on disk
}

// writer is the node's single write path (group commit): it drains every
// queued writeReq of every group into ONE bbolt transaction, so ONE commit
// (fsync) makes log appends, hard states and applied state of many groups
// durable together.
type writer struct {
	db      *bolt.DB
	log     zerolog.Logger
	metrics *metrics
	knobs   *Knobs

	mu      sync.Mutex
	queue   []*writeReq
	stopped bool
	// busy: a batch is being written (tests wait for quiescence with idle).
	busy bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	tr   transport
	self uint64

	keyBuf []byte
	outBuf []*pb.Message

	// broken is the error of a commit that failed (a disk error). Nothing
	// is written after it: a group's queued writes follow the lost one, so
	// committing them would leave a hole in its log while this node tells
	// the leader it holds them, and state machines that applied in the lost
	// transaction no longer match their buckets. Owned by the writer
	// goroutine.
	broken error
}

// sendRemote sends the responses raft attached to r's append that are
// addressed to peers.
func (w *writer) sendRemote(r *writeReq) {
	out := w.outBuf[:0]
	for _, resp := range r.append.GetResponses() {
		if resp.GetTo() != w.self {
			out = append(out, resp)
		}
	}
	if len(out) > 0 {
		w.tr.send(r.g.id, out)
	}
	clear(out)
	w.outBuf = out[:0]
}

func newWriter(db *bolt.DB, lg zerolog.Logger, m *metrics, k *Knobs, tr transport, self uint64) *writer {
	w := &writer{db: db, log: lg, metrics: m, knobs: k, tr: tr, self: self,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// submit queues r; it never blocks. It returns false once the writer stopped.
func (w *writer) submit(r *writeReq) bool {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return false
	}
	r.queuedAt = time.Now()
	w.queue = append(w.queue, r)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// close stops the writer after the batch in progress and fails what is
// still queued with ErrStopped.
func (w *writer) close() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		<-w.done
		return
	}
	w.stopped = true
	w.mu.Unlock()
	close(w.stop)
	<-w.done
}

// lazyDelay bounds how long a lazy request waits for an urgent one.
const lazyDelay = 5 * time.Millisecond

// deferDelay and deferBytes bound how long deferred requests are held back:
// until the oldest waited deferDelay, or their entries reach deferBytes (so
// that raft, which hands out at most MaxCommittedSizePerReady of entries
// not yet applied, never waits on the deferral for large entries).
const (
	deferDelay = 20 * time.Millisecond
	deferBytes = 256 << 10
)

// applyLinger: after a commit that appended a leader's entries, the next
// commit waits up to this long for that leader's apply (its followers'
// acknowledgements are typically in flight, their fsync having run in
// parallel with ours), so the apply rides the next commit instead of
// waiting a whole extra one behind it.
const applyLinger = 500 * time.Microsecond

// planBatch decides, from the queue at now, what the next commit carries.
// It returns the requests to commit now (in queue order) and those to
// keep; when nothing is due it returns no take and the time to look again
// (zero: when woken).
//
// A commit is due for an urgent request (but during the linger after a
// leader's append, unless a leader's apply is queued), for a lazy request
// older than lazyDelay, or for deferred requests older than deferDelay or
// larger than deferBytes. Deferred requests ride along only when they are
// due, or when their group has queued a request they must not be reordered
// with: one that applies entries or installs a snapshot (all of the
// group's requests then go, in queue order). Everything else a group
// queues (log appends, hard states) touches other keys than its applies
// and compactions, so the two may commit in either order.
func planBatch(queue []*writeReq, now, lingerUntil time.Time) (take, keep []*writeReq, wakeAt time.Time) {
	var (
		urgent, leaderApply bool
		firstLazy, firstDef time.Time
		defBytes            int
		ordered             map[*Group]bool
	)
	for _, r := range queue {
		switch {
		case r.deferred:
			if firstDef.IsZero() {
				firstDef = r.queuedAt
			}
			defBytes += r.applyBytes
		case r.lazy:
			if firstLazy.IsZero() {
				firstLazy = r.queuedAt
			}
		default:
			urgent = true
			leaderApply = leaderApply || r.leaderApply
		}
		if !r.deferred && (r.apply != nil || !raft.IsEmptySnap(r.append.GetSnapshot())) {
			if ordered == nil {
				ordered = map[*Group]bool{}
			}
			ordered[r.g] = true
		}
	}
	deferDue := !firstDef.IsZero() && (!now.Before(firstDef.Add(deferDelay)) || defBytes >= deferBytes)
	lazyDue := !firstLazy.IsZero() && !now.Before(firstLazy.Add(lazyDelay))
	if !(urgent && (leaderApply || !now.Before(lingerUntil))) && !lazyDue && !deferDue {
		var deadlines []time.Time
		if urgent {
			deadlines = append(deadlines, lingerUntil)
		}
		if !firstLazy.IsZero() {
			deadlines = append(deadlines, firstLazy.Add(lazyDelay))
		}
		if !firstDef.IsZero() {
			deadlines = append(deadlines, firstDef.Add(deferDelay))
		}
		for _, t := range deadlines {
			if t.After(now) && (wakeAt.IsZero() || t.Before(wakeAt)) {
				wakeAt = t
			}
		}
		return nil, queue, wakeAt
	}
	if deferDue {
		return queue, nil, time.Time{}
	}
	for _, r := range queue {
		if r.deferred && !ordered[r.g] {
			keep = append(keep, r)
		} else {
			take = append(take, r)
		}
	}
	return take, keep, time.Time{}
}

func (w *writer) run() {
	defer close(w.done)
	var lingerUntil time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		w.mu.Lock()
		batch, keep, wakeAt := planBatch(w.queue, time.Now(), lingerUntil)
		if len(batch) > 0 {
			// keep is a fresh slice (or nil): the queue's old array now
			// belongs to batch alone.
			w.queue = keep
			w.busy = true
		}
		w.mu.Unlock()
		if len(batch) == 0 {
			var timerC <-chan time.Time
			if !wakeAt.IsZero() {
				timer.Reset(time.Until(wakeAt))
				timerC = timer.C
			}
			select {
			case <-w.wake:
			case <-timerC:
			case <-w.stop:
				timer.Stop()
				w.failQueued()
				return
			}
			timer.Stop()
			continue
		}
		expectApply := false
		for _, r := range batch {
			expectApply = expectApply || r.leaderAppend
		}
		w.commit(batch)
		// onDurable runs here, before the next transaction calls Apply
		// again, so a state machine never sees two calls at once.
		// Remote responses (MsgAppResp, votes) leave straight from here: what
		// they promise is now on disk, and skipping the hop through the
		// group's goroutine shortens every commit's critical path.
		for _, r := range batch {
			for _, fn := range r.onDurable {
				fn()
			}
			r.onDurable = nil
			if r.err == nil && r.append != nil {
				w.sendRemote(r)
			}
		}
		for _, r := range batch {
			r.g.writeDone(r)
		}
		w.mu.Lock()
		w.busy = false
		w.mu.Unlock()
		lingerUntil = time.Time{}
		if expectApply {
			lingerUntil = time.Now().Add(applyLinger)
		}
	}
}

// idle says whether nothing is queued or being written.
func (w *writer) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) == 0 && !w.busy
}

// failQueued answers everything still queued with ErrStopped.
func (w *writer) failQueued() {
	w.mu.Lock()
	rest := w.queue
	w.queue = nil
	w.mu.Unlock()
	for _, r := range rest {
		r.err = ErrStopped
		r.g.writeDone(r)
	}
}

// commit runs batch in one transaction. When one request fails (a
// StateMachine.Apply error, a corrupt entry), the transaction is rolled back
// and run again without it; the failed request carries its error back to
// its group, which stops. State machines whose Apply already ran in the
// rolled-back transaction get Restore first, so their in-memory indexes match
// the bucket again before Apply sees the same entries a second time.
func (w *writer) commit(batch []*writeReq) {
	if w.broken != nil {
		w.refuse(batch, fmt.Errorf("raftlog: an earlier commit failed, nothing is written after it: %w", w.broken))
		return
	}
	live := batch
	for attempt := 0; len(live) > 0; attempt++ {
		failed, err := w.tryCommit(live, attempt > 0)
		if err == nil {
			return
		}
		if failed == nil {
			// The commit itself failed (disk error): nothing is durable,
			// and nothing may be written after it.
			w.broken = err
			w.metrics.writeFailures.Inc()
			w.refuse(live, err)
			w.log.Error().Err(err).Msg("raftlog write transaction failed; this node writes nothing more and its groups stop")
			return
		}
		failed.err = err
		failed.onDurable = nil
		failed.g.writeFailed.Store(true)
		next := live[:0:0]
		for _, r := range live {
			if r != failed {
				next = append(next, r)
			}
		}
		live = next
	}
}

// refuse answers every request of batch with err, unwritten, and stops
// their groups.
func (w *writer) refuse(batch []*writeReq, err error) {
	for _, r := range batch {
		r.err = err
		r.onDurable = nil
		r.g.writeFailed.Store(true)
	}
}

func (w *writer) tryCommit(batch []*writeReq, retry bool) (*writeReq, error) {
	tx, err := w.db.Begin(true)
	if err != nil {
		return nil, fmt.Errorf("raftlog: begin write: %w", err)
	}
	entries := 0
	for _, r := range batch {
		r.onAck, r.onDurable = r.onAck[:0], r.onDurable[:0]
		if r.g.writeFailed.Load() {
			// An earlier write of this group failed: nothing after it may
			// be applied (that would skip entries).
			r.err = errGroupStopped
			continue
		}
		if err := w.exec(tx, r, retry); err != nil {
			_ = tx.Rollback()
			return r, err
		}
		entries += len(r.append.GetEntries())
	}
	// Every Apply succeeded: acknowledgements go out now, while the commit
	// runs (their entries are already durable on a quorum).
	for _, r := range batch {
		for _, fn := range r.onAck {
			fn()
		}
		clear(r.onAck)
		r.onAck = r.onAck[:0]
	}
	if w.knobs != nil && w.knobs.BeforePersist != nil {
		w.knobs.BeforePersist()
	}
	start := time.Now()
	if w.knobs != nil && w.knobs.FailCommit != nil {
		if err := w.knobs.FailCommit(); err != nil {
			_ = tx.Rollback()
			return nil, fmt.Errorf("raftlog: commit: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("raftlog: commit: %w", err)
	}
	w.metrics.fsyncSeconds.Observe(time.Since(start).Seconds())
	w.metrics.batchEntries.Observe(float64(entries))
	w.metrics.batchGroups.Observe(float64(len(batch)))
	stats := tx.Stats()
	w.metrics.batchPages.Observe(float64(stats.GetWrite()))
	return nil, nil
}

// exec writes one request: snapshot install, then log append and hard
// state, then the apply of committed entries, then compaction.
func (w *writer) exec(tx *bolt.Tx, r *writeReq, retry bool) error {
	gb, err := openGroupBuckets(tx, r.g.id)
	if err != nil {
		return err
	}
	if retry && r.applyCalled {
		if err := r.g.sm.Restore(gb.state); err != nil {
			return fmt.Errorf("raftlog: group %d: restore after rollback: %w", r.g.id, err)
		}
	}
	r.applyCalled = false
	if m := r.append; m != nil {
		if snap := m.GetSnapshot(); !raft.IsEmptySnap(snap) {
			if gb, err = r.g.installSnapshot(tx, gb, snap); err != nil {
				return err
			}
			r.applyCalled = true
		}
		if err := w.appendEntries(gb, m.GetEntries()); err != nil {
			return err
		}
		if m.Term != nil || m.Vote != nil || m.Commit != nil {
			hs := &pb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())}
			if err := gb.meta.Put(keyHard, encodeHardState(hs)); err != nil {
				return err
			}
		}
	}
	if m := r.apply; m != nil && len(m.GetEntries()) > 0 {
		if err := w.applyEntries(gb, r, m.GetEntries()); err != nil {
			return err
		}
	}
	if c := r.compact; c != nil {
		if err := compactLog(gb, c); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) appendEntries(gb groupBuckets, ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	first := ents[0].GetIndex()
	// A follower whose log diverged replaces its tail: drop every entry at
	// or after the first new index.
	c := gb.log.Cursor()
	w.keyBuf = indexKey(w.keyBuf, first)
	for k, _ := c.Seek(w.keyBuf); k != nil; k, _ = c.Seek(w.keyBuf) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	for _, e := range ents {
		// bbolt keeps the key and value slices until the transaction
		// commits: each Put needs its own, never a reused buffer.
		if err := gb.log.Put(indexKey(nil, e.GetIndex()), appendEntryValue(nil, e)); err != nil {
			return err
		}
	}
	return nil
}

// applyEntries hands committed entries that carry data to the state
// machine and records the applied index in the same transaction.
func (w *writer) applyEntries(gb groupBuckets, r *writeReq, ents []*pb.Entry) error {
	g := r.g
	batch := g.applyBuf[:0]
	for _, e := range ents {
		if e.GetType() != pb.EntryNormal || len(e.GetData()) == 0 {
			// Empty entries are new leaders' no-ops; configuration changes
			// are never proposed (voters are fixed at bootstrap).
			continue
		}
		batch = append(batch, Entry{Index: e.GetIndex(), Term: e.GetTerm(), Data: e.GetData()})
	}
	g.applyBuf = batch[:0]
	if len(batch) > 0 {
		start := time.Now()
		r.applyCalled = true
		fx, err := g.sm.Apply(gb.state, batch)
		w.metrics.applySeconds.Observe(time.Since(start).Seconds())
		clear(batch)
		if err != nil {
			return fmt.Errorf("raftlog: group %d: apply: %w", g.id, err)
		}
		if fx.Acknowledge != nil {
			r.onAck = append(r.onAck, fx.Acknowledge)
		}
		if fx.Reveal != nil {
			r.onDurable = append(r.onDurable, fx.Reveal)
		}
	}
	last := ents[len(ents)-1]
	r.appliedIdx, r.appliedTrm, r.applyCount = last.GetIndex(), last.GetTerm(), len(batch)
	return gb.meta.Put(keyApplied, encodePair(r.appliedIdx, r.appliedTrm))
}

// maxCompactDeletes bounds the log keys one transaction deletes, so a
// compaction does not turn one group commit into a long stall. Keys left
// below the compaction point are garbage nobody reads; the next compaction
// request continues with them.
const maxCompactDeletes = 1024

// compactLog records the compaction point and deletes up to
// maxCompactDeletes entries <= c.index; c.more reports leftovers. A
// compaction planned before a snapshot install that committed first (a
// follower far behind) is stale: the point already moved past it, and
// writing the older point back would make a restart look for entries the
// install deleted.
func compactLog(gb groupBuckets, c *compaction) error {
	point, _, err := decodePair(gb.meta.Get(keySnap))
	if err != nil {
		return fmt.Errorf("compaction point: %w", err)
	}
	if c.index < point {
		c.more = false
		return nil
	}
	if err := gb.meta.Put(keySnap, encodePair(c.index, c.term)); err != nil {
		return err
	}
	keys := make([][]byte, 0, 64)
	cur := gb.log.Cursor()
	for k, _ := cur.First(); k != nil && beUint64(k) <= c.index; k, _ = cur.Next() {
		if len(keys) == maxCompactDeletes {
			c.more = true
			break
		}
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := gb.log.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func beUint64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// errGroupStopped marks a request whose group stopped before it ran.
var errGroupStopped = errors.New("raftlog: group stopped")
