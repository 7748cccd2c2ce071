package raftlog

import (
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/raftgate/raftgate/raftlog/wal"
)

// appendReq is one group's MsgStorageAppend (entries, hard state, snapshot
// point) on its way into the write-ahead log, or a bootstrap write (build).
type appendReq struct {
	g   *Group
	msg *pb.Message
	// build, when set, adds its own records (a group's reconciliation at
	// open); done is closed once it is durable.
	build func(*wal.Batch)
	done  chan struct{}
	err   error
}

// release tells the log that a group no longer needs entries <= index.
type release struct {
	group GroupID
	index uint64
}

// logWriter is the node's log write path (group commit): it takes every
// append queued by every group since its last write and makes them durable
// with ONE write and, when any of them needs it (raft.MustSync), ONE
// fdatasync. Only then does it send the responses raft attached to them
// for peers (MsgAppResp, votes) and hand them back to their groups.
type logWriter struct {
	wal     *wal.WAL
	log     zerolog.Logger
	metrics *metrics
	tr      transport
	// stepped: no goroutine; Node.Step runs runOnce (Knobs.Stepped).
	stepped bool

	mu       sync.Mutex
	queue    []*appendReq
	releases []release
	stopped  bool
	busy     bool
	// failed is set by breakOff (another write path failed).
	failed error

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	// Writer-owned.
	spare  []*appendReq // the queue's other slice: see run
	batch  wal.Batch
	outBuf []*pb.Message
	// prevHS is each group's hard state before the batch being encoded
	// (reused across batches).
	prevHS map[GroupID]*pb.HardState
	// broken is the error of a write that failed: nothing is written after
	// it, so no group's log can get a hole behind the lost write.
	broken error
}

func newLogWriter(w *wal.WAL, lg zerolog.Logger, m *metrics, tr transport, stepped bool) *logWriter {
	lw := &logWriter{wal: w, log: lg, metrics: m, tr: tr, stepped: stepped,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if !stepped {
		go lw.run()
	}
	return lw
}

// submit queues r; it never blocks. It returns false once the writer stopped.
func (lw *logWriter) submit(r *appendReq) bool {
	lw.mu.Lock()
	if lw.stopped {
		lw.mu.Unlock()
		return false
	}
	lw.queue = append(lw.queue, r)
	lw.mu.Unlock()
	lw.poke()
	return true
}

// write makes build's records durable and waits for them (used at open).
func (lw *logWriter) write(build func(*wal.Batch)) error {
	r := &appendReq{build: build, done: make(chan struct{})}
	if !lw.submit(r) {
		return ErrStopped
	}
	if lw.stepped {
		lw.runOnce()
	}
	<-r.done
	return r.err
}

// release queues a release; the writer applies it after its next write.
func (lw *logWriter) release(g GroupID, index uint64) {
	lw.mu.Lock()
	lw.releases = append(lw.releases, release{group: g, index: index})
	lw.mu.Unlock()
	lw.poke()
}

func (lw *logWriter) poke() {
	select {
	case lw.wake <- struct{}{}:
	default:
	}
}

// close stops the writer after the write in progress; what is still queued
// fails with ErrStopped.
func (lw *logWriter) close() {
	lw.mu.Lock()
	if lw.stopped {
		lw.mu.Unlock()
		<-lw.done
		return
	}
	lw.stopped = true
	lw.mu.Unlock()
	close(lw.stop)
	if lw.stepped {
		lw.failQueued()
		close(lw.done)
	}
	<-lw.done
}

func (lw *logWriter) run() {
	defer close(lw.done)
	for {
		if lw.runOnce() {
			continue
		}
		select {
		case <-lw.wake:
		case <-lw.stop:
			lw.failQueued()
			return
		}
	}
}

// runOnce writes what is queued, in one batch, and the releases; it
// reports whether there was anything.
func (lw *logWriter) runOnce() bool {
	lw.mu.Lock()
	// The queue alternates between two slices: groups append to one
	// while the writer writes the other (no allocation per write).
	batch, rels := lw.queue, lw.releases
	lw.queue, lw.releases = lw.spare, nil
	lw.spare = nil
	if lw.failed != nil && lw.broken == nil {
		lw.broken = lw.failed
	}
	lw.busy = len(batch) > 0 || len(rels) > 0
	lw.mu.Unlock()
	if !lw.busy {
		lw.spare = batch
		return false
	}
	if len(batch) > 0 {
		lw.writeBatch(batch)
	}
	clear(batch)
	lw.spare = batch[:0]
	for _, r := range rels {
		lw.wal.Release(uint32(r.group), r.index)
	}
	lw.mu.Lock()
	lw.busy = false
	lw.mu.Unlock()
	return true
}

// breakOff stops all later writes with err (the node's state file
// failed: a node that cannot apply must not go on acknowledging).
func (lw *logWriter) breakOff(err error) {
	lw.mu.Lock()
	if lw.failed == nil {
		lw.failed = err
	}
	lw.mu.Unlock()
}

// idle says whether nothing is queued or being written.
func (lw *logWriter) idle() bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return len(lw.queue) == 0 && len(lw.releases) == 0 && !lw.busy
}

// writeBatch writes batch with one write (and one fdatasync when needed),
// then sends peers' responses and hands each request back to its group.
func (lw *logWriter) writeBatch(batch []*appendReq) {
	err := lw.broken
	if err == nil {
		sync, entries := lw.encode(batch)
		start := time.Now()
		err = lw.wal.Write(&lw.batch, sync)
		if sync {
			lw.metrics.walSyncSeconds.Observe(time.Since(start).Seconds())
		}
		lw.metrics.walBatchEntries.Observe(float64(entries))
		lw.metrics.walBatchRequests.Observe(float64(len(batch)))
		if err != nil {
			lw.broken = err
			lw.metrics.writeFailures.Inc()
			lw.log.Error().Err(err).Msg("write-ahead log write failed; this node writes nothing more and its groups stop")
		}
	} else {
		err = fmt.Errorf("raftlog: an earlier log write failed, nothing is written after it: %w", err)
	}
	for _, r := range batch {
		r.err = err
		if err == nil && r.msg != nil {
			lw.sendRemote(r)
		}
		if r.done != nil {
			close(r.done)
		} else {
			r.g.appendDone(r)
		}
	}
}

// encode fills lw.batch from batch and says whether it must be synced:
// new entries, a snapshot point, or a changed term or vote (raft.MustSync).
// A commit-index-only hard state need not be: losing it loses nothing
// anyone was promised.
func (lw *logWriter) encode(batch []*appendReq) (sync bool, entries int) {
	b := &lw.batch
	b.Reset()
	if lw.prevHS == nil {
		lw.prevHS = make(map[GroupID]*pb.HardState)
	}
	prev := lw.prevHS
	clear(prev)
	for _, r := range batch {
		if r.build != nil {
			r.build(b)
			sync = true
			continue
		}
		m, g := r.msg, uint32(r.g.id)
		if snap := m.GetSnapshot(); !raft.IsEmptySnap(snap) {
			b.SetFirstIndex(g, snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm())
			sync = true
		}
		if ents := m.GetEntries(); len(ents) > 0 {
			b.Append(g, ents)
			entries += len(ents)
			sync = true
		}
		if m.Term != nil || m.Vote != nil || m.Commit != nil {
			hs := newHardState(m.GetTerm(), m.GetVote(), m.GetCommit())
			before := prev[r.g.id]
			if before == nil {
				before = lw.wal.HardState(g)
			}
			sync = sync || raft.MustSync(hs, before, 0)
			prev[r.g.id] = hs
			b.SetHardState(g, hs)
		}
	}
	return sync, entries
}

// sendRemote sends the responses raft attached to r's append that are
// addressed to peers: what they promise is now on disk.
func (lw *logWriter) sendRemote(r *appendReq) {
	out := lw.outBuf[:0]
	for _, resp := range r.msg.GetResponses() {
		if resp.GetTo() != r.g.self {
			out = append(out, resp)
		}
	}
	if len(out) > 0 {
		lw.tr.send(r.g.id, out)
	}
	clear(out)
	lw.outBuf = out[:0]
}

// failQueued answers everything still queued with ErrStopped.
func (lw *logWriter) failQueued() {
	lw.mu.Lock()
	rest := lw.queue
	lw.queue = nil
	lw.mu.Unlock()
	for _, r := range rest {
		r.err = ErrStopped
		if r.done != nil {
			close(r.done)
		} else {
			r.g.appendDone(r)
		}
	}
}

// hardStateBox holds a HardState and the values its pointer fields point
// to, so that one is built in one allocation, not four.
type hardStateBox struct {
	hs                 pb.HardState
	term, vote, commit uint64
}

func newHardState(term, vote, commit uint64) *pb.HardState {
	b := &hardStateBox{term: term, vote: vote, commit: commit}
	b.hs.Term, b.hs.Vote, b.hs.Commit = &b.term, &b.vote, &b.commit
	return &b.hs
}
