package raftlog

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
)

// applyReq is one unit of work for the state applier: a group's
// MsgStorageApply (committed entries to apply), a snapshot install, or a
// read (view) of a group's state.
type applyReq struct {
	g *Group
	// apply: raft's MsgStorageApply; its entries are applied in log order.
	apply *pb.Message
	// install: a snapshot to install (state replaced from the spooled file),
	// checkpointed before done is closed.
	install *pb.Snapshot
	// view reads the group's state bucket inside the applier's transaction,
	// so it sees every applied entry (checkpointed or not). viewClaim says
	// who got to it first: the applier (to run it) or its caller, whose
	// context ended (so it never runs).
	view      func(*bolt.Bucket) error
	viewClaim atomic.Int32
	// flush: checkpoint before done is closed (a backup wants everything
	// applied so far in state.db).
	flush bool
	// update runs alone in a transaction of its own, checkpointed before
	// done is closed (creating or removing a group's buckets, a pin): what
	// was applied before it is checkpointed first, so a failing update is
	// rolled back with nothing else lost.
	update func(*bolt.Tx) error
	done   chan struct{}

	// Results, read by the group after appliedDone (or done).
	appliedIdx uint64
	applyCount int
	err        error
	// confs are the outcomes of the configuration changes among the
	// entries, in log order (membership.go).
	confs []confResult

	// Applier-owned: the state machine's effects of its Apply, until they
	// ran.
	fx Applied
}

// An applyReq's viewClaim.
const (
	viewQueued int32 = iota
	viewRunning
	viewAbandoned
)

// checkpoint is a durable state commit the applier reports to a group:
// its state at index is in state.db, so its log may be released up to it.
type checkpoint struct {
	index uint64
}

// applier is the node's state write path. It keeps one bbolt write
// transaction open across many batches: each batch of queued requests (of
// every group, leaders and followers alike) runs Apply inside it, then the
// state machines' Acknowledge and Reveal, then the groups learn what was
// applied. Readers (View, StateDigest) are served inside the same
// transaction, so a read that follows an acknowledgement sees what was
// acknowledged although it is not yet checkpointed. The transaction is
// committed (a checkpoint: bbolt's fsyncs) when checkpointDue says so, off
// every acknowledgement's path: what it makes durable is already in the
// write-ahead log, and a restart replays the log past each group's
// checkpointed applied index.
type applier struct {
	db      *bolt.DB
	log     zerolog.Logger
	metrics *metrics
	knobs   *Knobs
	policy  checkpointPolicy
	// onBroken is told of a failed checkpoint: the node stops writing.
	onBroken func(error)

	spare []*applyReq // the queue's other slice: see run; applier-owned

	mu      sync.Mutex
	queue   []*applyReq
	stopped bool
	busy    bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	// Applier-owned.
	tx *bolt.Tx
	// journal holds every apply request run in tx, in order: the groups
	// learn from it how far a checkpoint made their state durable.
	journal []*applyReq
	// since the last checkpoint
	lastCheckpoint time.Time
	entries        int
	// broken is the error of a failed Apply, install or checkpoint: state
	// machines then run ahead of state.db, so nothing more is applied.
	broken error
	// crash, set by a Knobs.AtConfChange failpoint, fails the next
	// checkpoint as a crash before it would.
	crash error
}

// checkpointPolicy decides when the applier commits.
type checkpointPolicy struct {
	interval time.Duration
	entries  int
}

// checkpointDue is the applier's commit rule, a pure function of its
// inputs: commit when a request needs it at once (force: a backup, a new
// group), when a transaction is open and interval has passed since the
// last checkpoint, or when entries applied reached the policy's count.
// Otherwise it says when to look again (zero: when woken).
func (p checkpointPolicy) checkpointDue(now, last time.Time, open bool, entries int, force bool) (due bool, wakeAt time.Time) {
	switch {
	case force:
		return true, time.Time{}
	case !open:
		return false, time.Time{}
	case entries >= p.entries || !now.Before(last.Add(p.interval)):
		return true, time.Time{}
	}
	return false, last.Add(p.interval)
}

func newApplier(db *bolt.DB, lg zerolog.Logger, m *metrics, k *Knobs, p checkpointPolicy, onBroken func(error)) *applier {
	a := newApplierState(db, lg, m, k, p, onBroken, k.now())
	if !k.stepped() {
		go a.run()
	}
	return a
}

// newApplierState returns an applier that runs nothing by itself: run, or
// a test, drives it with step.
func newApplierState(db *bolt.DB, lg zerolog.Logger, m *metrics, k *Knobs, p checkpointPolicy, onBroken func(error), now time.Time) *applier {
	return &applier{db: db, log: lg, metrics: m, knobs: k, policy: p, onBroken: onBroken,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		lastCheckpoint: now}
}

// submit queues r; it never blocks. It returns false once the applier
// stopped.
func (a *applier) submit(r *applyReq) bool {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return false
	}
	a.queue = append(a.queue, r)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return true
}

// idle says whether nothing is queued or being applied.
func (a *applier) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue) == 0 && !a.busy
}

// close stops the applier: what is applied is checkpointed, what is still
// queued fails with ErrStopped.
func (a *applier) close() {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		<-a.done
		return
	}
	a.stopped = true
	a.mu.Unlock()
	close(a.stop)
	if a.knobs.stepped() {
		a.shutdown(a.knobs.now())
		close(a.done)
	}
	<-a.done
}

func (a *applier) run() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		ran, wakeAt := a.runOnce(time.Now())
		if ran {
			continue
		}
		var timerC <-chan time.Time
		if !wakeAt.IsZero() {
			timer.Reset(time.Until(wakeAt))
			timerC = timer.C
		}
		select {
		case <-a.wake:
		case <-timerC:
		case <-a.stop:
			timer.Stop()
			a.shutdown(time.Now())
			return
		}
		timer.Stop()
	}
}

// runOnce takes what is queued and runs step over it at now. It reports
// whether there was anything, and when step wants to look again.
func (a *applier) runOnce(now time.Time) (ran bool, wakeAt time.Time) {
	a.mu.Lock()
	// The queue alternates between two slices: groups append to one
	// while the applier applies the other (no allocation per batch).
	batch := a.queue
	a.queue, a.spare = a.spare, nil
	a.busy = len(batch) > 0
	a.mu.Unlock()
	wakeAt = a.step(batch, now)
	clear(batch)
	a.spare = batch[:0]
	if len(batch) == 0 {
		return false, wakeAt
	}
	a.mu.Lock()
	a.busy = false
	a.mu.Unlock()
	return true, time.Time{}
}

// runIfStepped runs what is queued at once when no goroutine does
// (Knobs.Stepped): a caller about to wait for its request.
func (a *applier) runIfStepped() {
	if a.knobs.stepped() {
		a.runOnce(a.knobs.now())
	}
}

// shutdown fails what is queued and checkpoints what was applied.
func (a *applier) shutdown(now time.Time) {
	a.failQueued()
	if a.broken == nil {
		a.checkpoint(now)
	}
	if a.tx != nil {
		_ = a.tx.Rollback()
	}
}

// step is one decision of the applier at now, over the requests queued
// since the last one: it runs them (if any), checkpoints when
// checkpointDue says so, and hands every request back. With nothing to
// run it returns when to look again (zero: when woken). It reads no clock.
func (a *applier) step(batch []*applyReq, now time.Time) (wakeAt time.Time) {
	if len(batch) == 0 {
		due, wakeAt := a.policy.checkpointDue(now, a.lastCheckpoint, a.tx != nil, a.entries, false)
		if !due {
			return wakeAt
		}
		a.checkpoint(now)
		return time.Time{}
	}
	force := a.runBatch(batch, now)
	if due, _ := a.policy.checkpointDue(now, a.lastCheckpoint, a.tx != nil, a.entries, force); due {
		a.checkpoint(now)
	}
	for _, r := range batch {
		a.finish(r)
	}
	return time.Time{}
}

// finish hands a request back to whoever waits for it.
func (a *applier) finish(r *applyReq) {
	switch {
	case r.done != nil:
		close(r.done)
	case r.apply != nil:
		r.g.appliedDone(r)
	}
}

// runBatch runs batch in the open transaction: applies, installs and views
// in queue order, then the effects of the applies. An install is
// checkpointed at once. It reports whether a checkpoint is needed now.
func (a *applier) runBatch(batch []*applyReq, now time.Time) (force bool) {
	for _, r := range batch {
		if a.broken != nil {
			r.err = fmt.Errorf("raftlog: an earlier write failed, nothing is applied after it: %w", a.broken)
			continue
		}
		if r.flush {
			force = true
			continue
		}
		if r.update != nil {
			r.err = a.runUpdate(r, now)
			continue
		}
		if err := a.begin(); err != nil {
			r.err = err
			continue
		}
		if r.view != nil {
			r.err = a.runView(r)
			continue
		}
		if err := a.exec(r); err != nil {
			r.err = err
			a.fail(err)
			continue
		}
		if r.install != nil {
			// Durable before anything relies on it: the log forgets what
			// the snapshot replaces once the group hears it is done.
			a.runEffects()
			a.checkpoint(now)
			continue
		}
		a.journal = append(a.journal, r)
		if a.confChanged(r) {
			// Durable before raft learns of it: a snapshot (the last
			// checkpoint) sent to a learner this change adds must name it.
			force = true
		}
	}
	if a.broken != nil {
		// The applies this batch ran before the failure were rolled back
		// with it (updates and installs were checkpointed on their own).
		for _, r := range batch {
			if r.apply != nil && r.err == nil {
				r.err = a.broken
			}
		}
		return false
	}
	a.runEffects()
	return force
}

func (a *applier) begin() error {
	if a.tx != nil {
		return nil
	}
	tx, err := a.db.Begin(true)
	if err != nil {
		return fmt.Errorf("raftlog: begin state transaction: %w", err)
	}
	a.tx = tx
	return nil
}

// runUpdate checkpoints what was applied so far, then runs r's update in a
// transaction of its own and checkpoints it. A failed update is rolled
// back, with nothing else lost.
func (a *applier) runUpdate(r *applyReq, now time.Time) error {
	a.runEffects()
	a.checkpoint(now)
	if a.broken != nil {
		return a.broken
	}
	if err := a.begin(); err != nil {
		return err
	}
	if err := r.update(a.tx); err != nil {
		_ = a.tx.Rollback()
		a.tx = nil
		return err
	}
	a.checkpoint(now)
	return a.broken
}

func (a *applier) runView(r *applyReq) error {
	if !r.viewClaim.CompareAndSwap(viewQueued, viewRunning) {
		return nil // its caller stopped waiting
	}
	if r.g.stopped() {
		// A removed group's buckets may be gone already.
		return ErrStopped
	}
	gb, err := openGroupBuckets(a.tx, r.g.id)
	if err != nil {
		return err
	}
	return r.view(gb.state)
}

// runEffects runs Acknowledge, then Reveal, of every journalled apply that
// has not run them yet, in log order. Their entries are committed (durable
// on a quorum of write-ahead logs), and readers see their state in this
// transaction already.
func (a *applier) runEffects() {
	for _, r := range a.journal {
		if r.fx.Acknowledge != nil {
			r.fx.Acknowledge()
		}
	}
	for _, r := range a.journal {
		if r.fx.Reveal != nil {
			r.fx.Reveal()
		}
		r.fx = Applied{}
	}
}

// exec runs one apply or install request in the open transaction and
// records its outcome in r (read by the group once r is handed back).
func (a *applier) exec(r *applyReq) error {
	gb, err := openGroupBuckets(a.tx, r.g.id)
	if err != nil {
		return err
	}
	if r.install != nil {
		return r.g.installSnapshot(a.tx, gb, r.install)
	}
	fx, count, confs, err := a.applyEntries(gb, r)
	r.fx, r.confs = fx, confs
	if ents := r.apply.GetEntries(); err == nil && len(ents) > 0 {
		last := ents[len(ents)-1]
		r.appliedIdx, r.applyCount = last.GetIndex(), count
	}
	return err
}

// applyEntries applies r's committed entries that carry data and the
// configuration changes among them, and writes the applied index beside
// the state.
func (a *applier) applyEntries(gb groupBuckets, r *applyReq) (fx Applied, count int, confs []confResult, err error) {
	ents := r.apply.GetEntries()
	if len(ents) == 0 {
		return Applied{}, 0, nil, nil
	}
	g := r.g
	batch := g.applyBuf[:0]
	for _, e := range ents {
		switch e.GetType() {
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			// The new configuration goes in this transaction with the
			// applied index, never apart from it (applyConfChange).
			res, err := applyConfChange(gb.meta, e)
			if err != nil {
				clear(batch)
				return Applied{}, 0, nil, fmt.Errorf("raftlog: group %d: %w", g.id, err)
			}
			confs = append(confs, res)
			continue
		}
		if len(e.GetData()) == 0 {
			// Empty entries are new leaders' no-ops.
			continue
		}
		batch = append(batch, Entry{Index: e.GetIndex(), Term: e.GetTerm(), Data: e.GetData()})
	}
	g.applyBuf = batch[:0]
	if count = len(batch); count > 0 {
		start := time.Now()
		applied, err := g.sm.Apply(gb.state, batch)
		a.metrics.applySeconds.Observe(time.Since(start).Seconds())
		clear(batch)
		if err != nil {
			return Applied{}, 0, nil, fmt.Errorf("raftlog: group %d: apply: %w", g.id, err)
		}
		fx = applied
	}
	a.entries += count
	last := ents[len(ents)-1]
	return fx, count, confs, gb.meta.Put(keyApplied, encodePair(last.GetIndex(), last.GetTerm()))
}

// confChanged says whether r applied a configuration change, and runs the
// "applied-" failpoint of each (Knobs.AtConfChange): the new
// configuration is in the open transaction, not yet checkpointed.
func (a *applier) confChanged(r *applyReq) bool {
	changed := false
	for _, c := range r.confs {
		if c.next == nil {
			continue
		}
		changed = true
		if k := a.knobs; k != nil && k.AtConfChange != nil {
			if err := k.AtConfChange(r.g.id, "applied-"+c.kind); err != nil && a.crash == nil {
				a.crash = err
			}
		}
	}
	return changed
}

// fail stops the applier after a failed Apply or install, as a failed
// checkpoint does: the open transaction, which may hold part of what
// failed, is rolled back, and nothing more is applied. The state machines
// that applied in it ran ahead of state.db, so their groups stop too; a
// restart replays the write-ahead log past the last checkpoint.
func (a *applier) fail(err error) {
	_ = a.tx.Rollback()
	a.tx = nil
	a.breakOff(err, "apply failed; this node writes nothing more and its groups stop")
}

// checkpoint commits the open transaction and tells each group how far its
// state is now durable.
func (a *applier) checkpoint(now time.Time) {
	if a.tx == nil {
		a.lastCheckpoint = now
		return
	}
	if k := a.knobs; k != nil && k.DuringCheckpoint != nil {
		k.DuringCheckpoint()
	}
	start := time.Now()
	var err error
	if k := a.knobs; k != nil && k.FailCommit != nil {
		err = k.FailCommit()
	}
	if err == nil && a.crash != nil {
		err = a.crash
	}
	if err != nil {
		_ = a.tx.Rollback()
	} else {
		err = a.tx.Commit()
	}
	a.tx = nil
	if err != nil {
		a.metrics.writeFailures.Inc()
		a.breakOff(fmt.Errorf("raftlog: checkpoint: %w", err), "state checkpoint failed; this node writes nothing more and its groups stop")
		return
	}
	a.metrics.checkpointSeconds.Observe(time.Since(start).Seconds())
	a.metrics.checkpointEntries.Observe(float64(a.entries))
	last := map[*Group]checkpoint{}
	var order []*Group
	for _, r := range a.journal {
		if r.appliedIdx == 0 {
			continue
		}
		if _, ok := last[r.g]; !ok {
			order = append(order, r.g)
		}
		last[r.g] = checkpoint{index: r.appliedIdx}
	}
	for _, g := range order {
		g.checkpointed(last[g])
	}
	clear(a.journal)
	a.journal = a.journal[:0]
	a.entries = 0
	a.lastCheckpoint = now
}

// breakOff records err as the applier's end: nothing more is applied, the
// log writer stops (onBroken), and every group that applied since the last
// checkpoint stops with err.
func (a *applier) breakOff(err error, msg string) {
	a.broken = err
	a.log.Error().Err(err).Msg(msg)
	a.onBroken(err)
	for _, r := range a.journal {
		r.fx = Applied{}
		r.g.checkpointFailed(err)
	}
	a.journal = nil
	a.entries = 0
}

// failQueued answers everything still queued with ErrStopped.
func (a *applier) failQueued() {
	a.mu.Lock()
	rest := a.queue
	a.queue = nil
	a.mu.Unlock()
	for _, r := range rest {
		r.err = ErrStopped
		a.finish(r)
	}
}

// installSnapshot replaces the group's state bucket with snap's content,
// loaded into the staging bucket by the install's earlier steps (a move of
// the bucket, not a copy), inside the applier's transaction, and calls
// StateMachine.Restore there.
func (g *Group) installSnapshot(tx *bolt.Tx, gb groupBuckets, snap *pb.Snapshot) error {
	meta := snap.GetMetadata()
	stage := gb.root.Bucket(bucketStaging)
	if stage == nil || stage.Bucket(bucketState) == nil {
		return fmt.Errorf("raftlog: group %d: install: the snapshot's staged state is missing", g.id)
	}
	if err := gb.root.DeleteBucket(bucketState); err != nil {
		return err
	}
	if err := stage.MoveBucket(bucketState, gb.root); err != nil {
		return fmt.Errorf("raftlog: group %d: install: %w", g.id, err)
	}
	if err := gb.root.DeleteBucket(bucketStaging); err != nil {
		return err
	}
	state := gb.root.Bucket(bucketState)
	if err := putConf(gb.meta, meta.GetConfState()); err != nil {
		return err
	}
	if err := gb.meta.Put(keyApplied, encodePair(meta.GetIndex(), meta.GetTerm())); err != nil {
		return err
	}
	if err := g.sm.Restore(state); err != nil {
		return fmt.Errorf("raftlog: group %d: restore snapshot: %w", g.id, err)
	}
	if k := g.n.cfg.Knobs; k != nil && k.DuringSnapshotInstall != nil {
		k.DuringSnapshotInstall(g.id)
	}
	return nil
}
