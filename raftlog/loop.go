package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// maxProposalBatch caps the entries stepped in one MsgProp, so that one
// huge batch does not hit MaxUncommittedEntriesSize as a whole.
const maxProposalBatch = 4096

// run is the group's goroutine: it owns the RawNode. Each iteration drains
// the whole inbox (completed writes first, so Storage is current before raft
// reads it; proposals last, so one Ready carries all of them) and then
// handles one Ready.
func (g *Group) run() {
	defer close(g.done)
	defer g.failPending(ErrStopped)
	g.publishLeader(0, g.rn.BasicStatus().GetTerm(), false)
	for {
		select {
		case <-g.wake:
		case <-g.stopc:
			return
		}
		if !g.iterate(time.Now()) {
			return
		}
	}
}

// iterate is one turn of the loop at now: it drains the inbox and handles
// one Ready. It reports false once the group failed.
func (g *Group) iterate(now time.Time) bool {
	// Swap the inbox for the spare one, so producers keep appending
	// while this iteration works and neither side reallocates.
	g.mu.Lock()
	in := g.in
	g.in = g.spare
	g.mu.Unlock()
	err := g.process(&in, now)
	g.spare = in.reset()
	if err != nil {
		g.fail(err)
		return false
	}
	if g.rn.HasReady() {
		g.handleReady()
	} else {
		g.answerAccepted(nil)
	}
	g.dropUnusedSnapshots()
	return true
}

// iterateIfStepped runs a turn at once when no goroutine does
// (Knobs.Stepped): a caller about to wait for the loop's answer.
func (g *Group) iterateIfStepped() {
	if k := g.n.cfg.Knobs; k.stepped() && !g.halted() {
		g.iterate(k.now())
	}
}

// fail stops the group after err; the loop returns at its next iteration.
// ErrRemoved is no failure of the node: Removed is closed instead.
func (g *Group) fail(err error) {
	g.stopOnce.Do(func() { close(g.stopc) })
	switch {
	case errors.Is(err, ErrStopped):
		return
	case errors.Is(err, ErrRemoved):
		select {
		case <-g.removedc:
			return
		default:
		}
		close(g.removedc)
		g.log.Warn().Uint64("replica", g.self).Msg("this replica was removed from the group's configuration; the group stops here (RemoveGroup deletes it)")
	default:
		g.log.Error().Err(err).Msg("raftlog group stopped")
		g.n.reportFailure(err)
	}
	// A stopped group leads nothing: watchers (the partition's request
	// tracking) fail what waits on it at once, and callers retry at the
	// new leader, rather than waiting for the node to close.
	g.publishLeader(0, g.rn.BasicStatus().GetTerm(), false)
}

func (g *Group) process(in *inbox, now time.Time) error {
	for _, r := range in.appended {
		if err := g.appendFinished(r); err != nil {
			return err
		}
	}
	for _, r := range in.applied {
		if err := g.applyFinished(r); err != nil {
			return err
		}
	}
	if in.failure != nil {
		return in.failure
	}
	for _, cp := range in.checkpoints {
		g.checkpointFinished(cp, now)
	}
	g.noteActive(in.ticks)
	for i := 0; i < min(in.ticks, g.n.cfg.ElectionTicks); i++ {
		g.rn.Tick()
	}
	if in.ticks > 0 {
		g.maybeCompact(now) // an idle group gets no checkpoint to prompt it
	}
	for _, m := range in.msgs {
		if err := g.checkHeartbeatCommit(m); err != nil {
			return err
		}
		g.step(m)
	}
	for _, s := range in.snaps {
		// Data names the local spool file; raft hands it back in the
		// Ready that installs it (handleReady, install).
		s.msg.Snapshot.Data = []byte(s.path)
		g.snapFiles = append(g.snapFiles, s.path)
		g.step(s.msg)
	}
	for _, fn := range in.reports {
		fn()
	}
	for _, fn := range in.control {
		fn()
	}
	if len(in.reads) > 0 {
		g.issueRead(in.reads)
	}
	g.balanceLeadership(in.ticks)
	if len(in.confs) > 0 {
		g.proposeConf(in.confs)
	}
	if len(in.props) > 0 {
		g.propose(in.props)
	}
	return nil
}

func (g *Group) step(m *pb.Message) {
	if err := g.rn.Step(m); err != nil {
		g.log.Debug().Err(err).Stringer("type", m.GetType()).Uint64("from", m.GetFrom()).Msg("raft step refused")
	}
}

// propose steps every queued proposal as few MsgProps. Accepted proposals
// learn their index from the tail of the next Ready's entries.
func (g *Group) propose(props []*proposal) {
	if !g.isLeader {
		ev := g.leader.Load()
		for _, p := range props {
			p.reply <- proposeResult{err: &NotLeaderError{Group: g.id, Leader: ev.Leader, Term: ev.Term}}
		}
		g.n.metrics.proposalErrors.Add(float64(len(props)))
		return
	}
	for len(props) > 0 {
		chunk := props[:min(len(props), maxProposalBatch)]
		props = props[len(chunk):]
		ents := g.propBuf[:0]
		live := chunk[:0:0]
		entries := make([]pb.Entry, len(chunk)) // one allocation, not one per entry; raft keeps them
		for _, p := range chunk {
			if p.ctx.Err() != nil {
				p.reply <- proposeResult{err: p.ctx.Err()}
				continue
			}
			e := &entries[len(ents)]
			e.Data = p.data
			ents = append(ents, e)
			live = append(live, p)
		}
		if len(ents) == 0 {
			continue
		}
		err := g.rn.Step(newPropMsg(g.self, ents))
		clear(ents)
		g.propBuf = ents[:0]
		if err != nil {
			perr := g.proposalError(err)
			for _, p := range live {
				p.reply <- proposeResult{err: perr}
			}
			g.n.metrics.proposalErrors.Add(float64(len(live)))
			continue
		}
		g.accepted = append(g.accepted, live...)
		g.n.metrics.proposals.Add(float64(len(live)))
	}
}

func (g *Group) proposalError(err error) error {
	if errors.Is(err, raft.ErrProposalDropped) {
		if st := g.rn.BasicStatus(); st.RaftState != raft.StateLeader {
			return &NotLeaderError{Group: g.id, Leader: NodeOf(st.Lead), Term: st.GetTerm()}
		}
		return ErrProposalDropped
	}
	return err
}

// answerAccepted tells accepted proposals where they landed: they are the
// last len(g.accepted) entries raft handed out in this Ready.
func (g *Group) answerAccepted(ents []*pb.Entry) {
	if len(g.accepted) == 0 {
		return
	}
	if len(ents) < len(g.accepted) {
		// Cannot happen: a leader appends accepted proposals to its log and
		// the next Ready carries them.
		g.log.Error().Int("accepted", len(g.accepted)).Int("entries", len(ents)).Msg("proposals missing from Ready")
		for _, p := range g.accepted {
			p.reply <- proposeResult{err: ErrProposalDropped}
		}
	} else {
		tail := ents[len(ents)-len(g.accepted):]
		for i, p := range g.accepted {
			if p.conf != nil {
				if tail[i].GetType() != pb.EntryConfChangeV2 {
					// Raft appended an empty entry instead: a change is
					// pending already.
					p.reply <- proposeResult{err: ErrProposalDropped}
					continue
				}
				p.conf.term = tail[i].GetTerm()
				g.confWaits[tail[i].GetIndex()] = p.conf
			}
			p.reply <- proposeResult{p: Proposal{Index: tail[i].GetIndex(), Term: tail[i].GetTerm()}}
		}
	}
	clear(g.accepted)
	g.accepted = g.accepted[:0]
}

func (g *Group) issueRead(ws []*readWaiter) {
	if !g.isLeader {
		// Only catch-ups go on, forwarded to a known leader.
		ev := g.leader.Load()
		notLeader := &NotLeaderError{Group: g.id, Leader: ev.Leader, Term: ev.Term}
		var forward []*readWaiter
		for _, w := range ws {
			if w.anyReplica && ev.Leader != 0 {
				forward = append(forward, w)
			} else {
				w.reply <- notLeader
			}
		}
		ws = forward
		if len(ws) == 0 {
			return
		}
	}
	g.readSeq++
	// ws may be the inbox's slice, reused next iteration: copy it.
	g.readIssued[g.readSeq] = &readBatch{waiters: slices.Clone(ws)}
	g.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, g.readSeq))
}

// handleReady implements steps 1, 2 and 4 of the order in doc.go for one
// Ready.
func (g *Group) handleReady() {
	rd := g.rn.Ready()
	g.observeLeadership(rd)
	g.answerAccepted(rd.Entries)
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := binary.BigEndian.Uint64(rs.RequestCtx)
		if b := g.readIssued[id]; b != nil {
			delete(g.readIssued, id)
			b.index = rs.Index
			g.readAwait = append(g.readAwait, b)
		}
	}
	g.releaseReads()

	var appendMsg, applyMsg *pb.Message
	out := g.outBuf[:0]
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			appendMsg = m
			if ents := m.GetEntries(); len(ents) > 0 {
				g.lastAppended = ents[len(ents)-1].GetIndex()
			} else if snap := m.GetSnapshot(); !raft.IsEmptySnap(snap) {
				g.lastAppended = snap.GetMetadata().GetIndex()
			}
		case raft.LocalApplyThread:
			applyMsg = m
		default:
			if m.GetType() == pb.MsgSnap {
				g.n.metrics.snapshotsSent.Inc()
				g.n.tr.sendSnapshot(g.id, m)
				continue
			}
			out = append(out, m)
		}
	}
	// Step 1: messages that need no local durability (a leader's MsgApp,
	// heartbeats, votes requested) leave now, in parallel with our fsync.
	if len(out) > 0 {
		g.n.tr.send(g.id, out)
	}
	clear(out)
	g.outBuf = out[:0]
	if appendMsg != nil {
		if snap := appendMsg.GetSnapshot(); !raft.IsEmptySnap(snap) {
			// Step 2a: a snapshot's state is installed and checkpointed
			// before the log is told to start after it.
			g.keepSnapshot = string(snap.GetData())
			if err := g.install(snap); err != nil {
				g.fail(err)
				return
			}
		}
		// Step 2: persist in the node's next log write.
		if !g.n.lw.submit(&appendReq{g: g, msg: appendMsg}) {
			g.stopOnce.Do(func() { close(g.stopc) })
			return
		}
	}
	// Step 4: apply in the applier's next batch. Raft hands out for apply
	// only entries already durable in this node's log.
	if applyMsg != nil {
		if !g.n.ap.submit(&applyReq{g: g, apply: applyMsg}) {
			g.stopOnce.Do(func() { close(g.stopc) })
			return
		}
	}
}

// installStepBytes is about how much of a snapshot's keys and values one
// applier step loads: other groups' applies run between steps.
const installStepBytes = 8 << 20

// install installs snap through the applier and waits until it is
// checkpointed: it loads the snapshot into the group's staging bucket in
// steps of installStepBytes, each a checkpointed transaction of its own,
// then swaps it in place of the state in one last step (applyReq.install).
func (g *Group) install(snap *pb.Snapshot) error {
	f, err := os.Open(string(snap.GetData()))
	if err != nil {
		return fmt.Errorf("raftlog: group %d: open snapshot: %w", g.id, err)
	}
	defer f.Close()
	loader := newSnapshotLoader(f)
	stepBytes := installStepBytes
	k := g.n.cfg.Knobs
	if k != nil && k.InstallStepBytes > 0 {
		stepBytes = k.InstallStepBytes
	}
	loaded, first := false, true
	for ; !loaded; first = false {
		step := &applyReq{g: g, done: make(chan struct{}), update: func(tx *bolt.Tx) error {
			gb, err := openGroupBuckets(tx, g.id)
			if err != nil {
				return err
			}
			if first {
				if err := dropStaging(gb.root); err != nil {
					return err
				}
				if _, err := gb.root.CreateBucket(bucketStaging); err != nil {
					return err
				}
				if _, err := gb.root.Bucket(bucketStaging).CreateBucket(bucketState); err != nil {
					return err
				}
			}
			stage := gb.root.Bucket(bucketStaging)
			if stage == nil || stage.Bucket(bucketState) == nil {
				return fmt.Errorf("raftlog: group %d: snapshot staging bucket gone", g.id)
			}
			loaded, err = loader.load(stage.Bucket(bucketState), stepBytes)
			if err != nil {
				return fmt.Errorf("raftlog: group %d: %w", g.id, err)
			}
			return nil
		}}
		if !g.n.ap.submit(step) {
			return ErrStopped
		}
		g.n.ap.runIfStepped()
		<-step.done
		if step.err != nil {
			return step.err
		}
		if k != nil && k.AfterInstallStep != nil {
			k.AfterInstallStep(g.id)
		}
	}
	r := &applyReq{g: g, install: snap, done: make(chan struct{})}
	if !g.n.ap.submit(r) {
		return ErrStopped
	}
	g.n.ap.runIfStepped()
	<-r.done
	if r.err != nil {
		return r.err
	}
	g.store.restored(snap.GetMetadata())
	g.setConf(snap.GetMetadata().GetConfState())
	g.setApplied(snap.GetMetadata().GetIndex())
	g.dropConfWaits(snap.GetMetadata().GetIndex())
	g.checkpoint = snap.GetMetadata().GetIndex()
	g.n.metrics.snapshotsInstalled.Inc()
	_ = os.Remove(string(snap.GetData()))
	return nil
}

// dropUnusedSnapshots deletes spooled snapshot files that raft refused
// (stale or superseded); the one it took is deleted after its install.
func (g *Group) dropUnusedSnapshots() {
	for _, f := range g.snapFiles {
		if f != g.keepSnapshot && f != "" {
			_ = os.Remove(f)
		}
	}
	clear(g.snapFiles)
	g.snapFiles = g.snapFiles[:0]
}

// propMsgBox holds a MsgProp and the values its pointer fields point to,
// so that it takes one allocation, not three.
type propMsgBox struct {
	msg  pb.Message
	typ  pb.MessageType
	from uint64
}

func newPropMsg(from uint64, ents []*pb.Entry) *pb.Message {
	b := &propMsgBox{typ: pb.MsgProp, from: from}
	b.msg.Type, b.msg.From, b.msg.Entries = &b.typ, &b.from, ents
	return &b.msg
}

// appendFinished implements step 3 of doc.go once an append is durable
// (the log writer already sent the responses addressed to peers).
func (g *Group) appendFinished(r *appendReq) error {
	if r.err != nil {
		return r.err
	}
	m := r.msg
	if m.Term != nil || m.Vote != nil || m.Commit != nil {
		g.store.setHardState(newHardState(m.GetTerm(), m.GetVote(), m.GetCommit()))
	}
	for _, resp := range m.GetResponses() {
		if resp.GetTo() == g.self {
			_ = g.rn.Step(resp)
		}
	}
	return nil
}

// applyFinished implements step 5 of doc.go once entries are applied.
func (g *Group) applyFinished(r *applyReq) error {
	if r.err != nil {
		return r.err
	}
	for _, c := range r.confs {
		if err := g.confApplied(c); err != nil {
			return err
		}
	}
	if r.appliedIdx > 0 {
		g.setApplied(r.appliedIdx)
		g.dropConfWaits(r.appliedIdx)
	}
	for _, resp := range r.apply.GetResponses() {
		_ = g.rn.Step(resp)
	}
	g.n.metrics.applied.Add(float64(r.applyCount))
	if k := g.n.cfg.Knobs; k != nil && k.AfterApply != nil {
		k.AfterApply(g.id, g.applied.Load())
	}
	g.releaseReads()
	return nil
}

// checkpointFinished implements step 6 of doc.go: the state is durable up
// to cp, so the log may be compacted and released up to it.
func (g *Group) checkpointFinished(cp checkpoint, now time.Time) {
	if cp.index > g.checkpoint {
		g.checkpoint = cp.index
	}
	g.maybeCompact(now)
}

func (g *Group) setApplied(index uint64) {
	if index <= g.applied.Load() {
		return
	}
	g.applied.Store(index)
	g.appliedGge.Set(float64(index))
}

// maybeCompact moves the compaction point when compactionPoint says so;
// the log releases the entries after its next write.
func (g *Group) maybeCompact(now time.Time) {
	index, due := compactionPoint(g.n.cfg, g.applied.Load(), g.checkpoint, g.store.compactIndex, now.Sub(g.lastCompact))
	if !due {
		return
	}
	term, err := g.store.Term(index)
	if err != nil {
		g.log.Warn().Err(err).Uint64("index", index).Msg("compaction skipped")
		return
	}
	g.store.compacted(index, term)
	g.lastCompact = now
	g.n.lw.release(g.id, index)
}

// compactionPoint is the compaction rule, a pure function: once
// SnapshotEntries were applied since the compaction point, compact up to
// SnapshotCatchUpEntries behind the applied index, and never past the last
// checkpoint (entries after it are what a restart replays). A group that
// rarely reaches that count would keep old log segments alive, so once
// Config.IdleCompactAfter has passed since its last compaction it compacts
// up to its checkpoint whatever the count.
func compactionPoint(cfg Config, applied, checkpoint, compactIndex uint64, sinceLast time.Duration) (uint64, bool) {
	index := min(checkpoint, applied-min(applied, cfg.SnapshotCatchUpEntries))
	due := applied >= compactIndex+cfg.SnapshotEntries
	if !due && checkpoint > compactIndex && sinceLast > cfg.IdleCompactAfter {
		index, due = checkpoint, true
	}
	return index, due && index > compactIndex
}

func (g *Group) releaseReads() {
	applied := g.applied.Load()
	keep := g.readAwait[:0]
	for _, b := range g.readAwait {
		if b.index <= applied {
			for _, w := range b.waiters {
				w.reply <- nil
			}
			continue
		}
		keep = append(keep, b)
	}
	clear(g.readAwait[len(keep):])
	g.readAwait = keep
}

// observeLeadership publishes leader/term changes and fails reads whose
// index was not confirmed when the leader or the term changes.
func (g *Group) observeLeadership(rd raft.Ready) {
	prev := g.leader.Load()
	lead, term := prev.Leader, prev.Term
	isLeader := g.isLeader
	if rd.SoftState != nil {
		lead = NodeOf(rd.SoftState.Lead)
		isLeader = rd.SoftState.RaftState == raft.StateLeader
	}
	if rd.HardState != nil && rd.HardState.GetTerm() != 0 {
		term = rd.HardState.GetTerm()
	}
	if lead == prev.Leader && term == prev.Term && isLeader == g.isLeader {
		return
	}
	g.isLeader = isLeader
	g.balanceTicks = 0
	// A read index not confirmed yet may never be: a leader's confirmation
	// round, or a follower's request forwarded to the old leader, is lost
	// with the change. (Confirmed ones wait in readAwait for the apply.)
	ev := &NotLeaderError{Group: g.id, Leader: lead, Term: term}
	for id, b := range g.readIssued {
		for _, w := range b.waiters {
			w.reply <- ev
		}
		delete(g.readIssued, id)
	}
	g.publishLeader(lead, term, isLeader)
}

func (g *Group) publishLeader(lead, term uint64, isLeader bool) {
	ev := &LeaderEvent{Group: g.id, Leader: lead, Term: term, IsSelf: isLeader && lead == g.n.cfg.NodeID}
	g.leader.Store(ev)
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
	g.n.metrics.leaderChanges.Inc()
	g.log.Info().Uint64("leader", lead).Uint64("term", term).Bool("self", ev.IsSelf).Msg("raft leadership")
	g.n.notify(*ev)
}

// failPending answers everything still waiting when the loop exits.
func (g *Group) failPending(err error) {
	for _, p := range g.accepted {
		p.reply <- proposeResult{err: err}
	}
	g.accepted = nil
	for _, b := range g.readIssued {
		for _, w := range b.waiters {
			w.reply <- err
		}
	}
	for _, b := range g.readAwait {
		for _, w := range b.waiters {
			w.reply <- err
		}
	}
	g.mu.Lock()
	in := g.in
	g.in = inbox{}
	g.mu.Unlock()
	for _, p := range in.props {
		p.reply <- proposeResult{err: err}
	}
	for _, w := range in.reads {
		w.reply <- err
	}
}

// ErrStaleLog stops a group whose log is shorter than what its current
// leader knows it acknowledged: the data dir was restored from an older
// copy (or lost writes). Raft cannot repair that safely (entries this node
// acknowledged may be committed on its word alone), so the node refuses to
// go on; restore the data dir from a peer, or start with an empty one.
var ErrStaleLog = errors.New("raftlog: this node's log is older than what it acknowledged to its leader (data dir restored from an old copy?)")

// staleLogHeartbeats is how many consecutive heartbeats of the current
// leader must commit past the log before the group stops with ErrStaleLog:
// about two election timeouts' worth.
func staleLogHeartbeats(c Config) int {
	return 2 * c.ElectionTicks / max(c.HeartbeatTicks, 1)
}

// checkHeartbeatCommit guards raft against a heartbeat whose commit index
// is past this node's log, on which raft would panic and take the whole
// process down. A correct leader never sends more than the follower
// acknowledged, so it means one of two things. From the leader, heartbeat
// after heartbeat: this node's log is older than what it acknowledged, and
// the group stops with ErrStaleLog. Otherwise a forged or corrupt message:
// its commit is lowered to the last index (raft ignores a commit that does
// not advance) and a warning is logged once. A heartbeat is the leader's
// when raft takes its sender as the leader: the known leader at this term,
// or any sender at this term while no leader is known or at a higher term
// (as on a node that just started, restored from a copy older than its
// log: its first heartbeats come before it knows its leader).
func (g *Group) checkHeartbeatCommit(m *pb.Message) error {
	if m.GetType() != pb.MsgHeartbeat {
		return nil
	}
	last, _ := g.store.LastIndex()
	last = max(last, g.lastAppended)
	if m.GetCommit() <= last {
		g.pastLogBeats = 0
		return nil
	}
	st := g.rn.BasicStatus()
	fromLeader := m.GetTerm() > st.GetTerm() ||
		(m.GetTerm() == st.GetTerm() && (st.Lead == m.GetFrom() || st.Lead == raft.None))
	if fromLeader {
		// One such message may be forged; a stale log makes every
		// heartbeat of the leader fail, for as long as it lasts.
		if g.pastLogBeats++; g.pastLogBeats > staleLogHeartbeats(g.n.cfg) {
			return fmt.Errorf("%w: group %d: leader %d commits index %d, this log ends at %d", ErrStaleLog, g.id, m.GetFrom(), m.GetCommit(), last)
		}
	} else if !g.warnedCommit {
		g.warnedCommit = true
		g.log.Warn().Uint64("from", m.GetFrom()).Uint64("commit", m.GetCommit()).Uint64("last_index", last).
			Msg("heartbeat commits past this node's log from a node that is not its leader: forged or corrupt; ignoring its commit")
	}
	m.Commit = &last
	return nil
}

// halted reports whether the group was told to stop, or failed.
func (g *Group) halted() bool {
	select {
	case <-g.stopc:
		return true
	default:
		return false
	}
}
