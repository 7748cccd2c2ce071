package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

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
		// Swap the inbox for the spare one, so producers keep appending
		// while this iteration works and neither side reallocates.
		g.mu.Lock()
		in := g.in
		g.in = g.spare
		g.mu.Unlock()
		err := g.process(&in)
		g.spare = in.reset()
		if err != nil {
			g.stopOnce.Do(func() { close(g.stopc) })
			if !errors.Is(err, ErrStopped) {
				g.log.Error().Err(err).Msg("raftlog group stopped")
				g.n.reportFailure(err)
				// A stopped group leads nothing: watchers (the partition's
				// request tracking) fail what waits on it at once, and
				// callers retry at the new leader, rather than waiting for
				// the node to close.
				g.publishLeader(0, g.rn.BasicStatus().GetTerm(), false)
			}
			return
		}
		if g.rn.HasReady() {
			g.handleReady()
		} else {
			g.answerAccepted(nil)
		}
		g.dropUnusedSnapshots()
	}
}

func (g *Group) process(in *inbox) error {
	for _, r := range in.done {
		if err := g.writeFinished(r); err != nil {
			return err
		}
	}
	for i := 0; i < min(in.ticks, g.n.cfg.ElectionTicks); i++ {
		g.rn.Tick()
	}
	for _, m := range in.msgs {
		if err := g.checkHeartbeatCommit(m); err != nil {
			return err
		}
		if m.GetType() == pb.MsgSnap {
			g.snapFiles = append(g.snapFiles, string(m.GetSnapshot().GetData()))
		}
		if err := g.rn.Step(m); err != nil {
			g.log.Debug().Err(err).Stringer("type", m.GetType()).Uint64("from", m.GetFrom()).Msg("raft step refused")
		}
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
	if len(in.props) > 0 {
		g.propose(in.props)
	}
	return nil
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
		for _, p := range chunk {
			if p.ctx.Err() != nil {
				p.reply <- proposeResult{err: p.ctx.Err()}
				continue
			}
			ents = append(ents, &pb.Entry{Data: p.data})
			live = append(live, p)
		}
		if len(ents) == 0 {
			continue
		}
		err := g.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(g.n.cfg.NodeID), Entries: ents})
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
			return &NotLeaderError{Group: g.id, Leader: st.Lead, Term: st.GetTerm()}
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

// handleReady implements steps 1–3 of the order in doc.go for one Ready.
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

	var req *writeReq
	out := g.outBuf[:0]
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			if req == nil {
				req = &writeReq{g: g}
			}
			req.append = m
			if ents := m.GetEntries(); len(ents) > 0 {
				g.lastAppended = ents[len(ents)-1].GetIndex()
			} else if snap := m.GetSnapshot(); !raft.IsEmptySnap(snap) {
				g.lastAppended = snap.GetMetadata().GetIndex()
			}
		case raft.LocalApplyThread:
			if req == nil {
				req = &writeReq{g: g}
			}
			req.apply = m
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
	if req != nil && req.append != nil {
		if snap := req.append.GetSnapshot(); !raft.IsEmptySnap(snap) {
			g.keepSnapshot = string(snap.GetData())
		}
	}
	// Step 2: persist (and apply) in the node's next group commit. A
	// follower's apply is a request of its own, deferred: nobody waits
	// for it, and holding it back keeps its state pages out of the
	// commits that acknowledge entries.
	var deferredApply *writeReq
	if req != nil && !g.isLeader && req.apply != nil {
		deferredApply = &writeReq{g: g, apply: req.apply, deferred: true, applyBytes: entriesBytes(req.apply.GetEntries())}
		req.apply = nil
		if req.append == nil {
			req = nil
		}
	}
	if req != nil {
		req.lazy = g.isLazy(req)
		req.leaderAppend = g.isLeader && len(req.append.GetEntries()) > 0
		req.leaderApply = g.isLeader && len(req.apply.GetEntries()) > 0
	}
	for _, r := range []*writeReq{req, deferredApply} {
		if r != nil && !g.n.w.submit(r) {
			g.stopOnce.Do(func() { close(g.stopc) })
			return
		}
	}
}

func entriesBytes(ents []*pb.Entry) int {
	n := 0
	for _, e := range ents {
		n += len(e.GetData())
	}
	return n
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

// isLazy: nothing waits on this write soon. A commit-index-only hard state
// is not on any acknowledgement's path (a follower's apply is not either:
// handleReady defers it on its own; the leader's apply answers proposers);
// entries, snapshots, term or vote changes and log-probe rejections are
// urgent.
func (g *Group) isLazy(r *writeReq) bool {
	if g.isLeader {
		return false
	}
	if m := r.append; m != nil {
		if len(m.GetEntries()) > 0 || !raft.IsEmptySnap(m.GetSnapshot()) {
			return false
		}
		// With no new entries, a MsgAppResp only repeats what the leader
		// already heard (it answers a commit-index update); a rejection
		// (log probing) or a vote answer is awaited.
		for _, resp := range m.GetResponses() {
			if resp.GetTo() != g.n.cfg.NodeID && (resp.GetType() != pb.MsgAppResp || resp.GetReject()) {
				return false
			}
		}
		if (m.Term != nil && m.GetTerm() != g.store.hard.GetTerm()) || (m.Vote != nil && m.GetVote() != g.store.hard.GetVote()) {
			return false
		}
	}
	return true
}

// writeFinished implements steps 3–4 of doc.go once a write is durable.
func (g *Group) writeFinished(r *writeReq) error {
	if r.err != nil {
		return r.err
	}
	if m := r.append; m != nil {
		if snap := m.GetSnapshot(); !raft.IsEmptySnap(snap) {
			g.store.restored(snap.GetMetadata())
			g.setApplied(snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm())
			_ = os.Remove(string(snap.GetData()))
		}
		g.store.appended(m.GetEntries())
		if m.Term != nil || m.Vote != nil || m.Commit != nil {
			g.store.setHardState(&pb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())})
		}
		// The writer already sent the responses addressed to peers.
		for _, resp := range m.GetResponses() {
			if resp.GetTo() == g.n.cfg.NodeID {
				_ = g.rn.Step(resp)
			}
		}
	}
	if c := r.compact; c != nil {
		g.store.compacted(c.index, c.term)
		g.compacting = false
		if c.more {
			g.compacting = true
			if !g.n.w.submit(&writeReq{g: g, compact: &compaction{index: c.index, term: c.term}, deferred: true}) {
				g.compacting = false
			}
		}
	}
	if m := r.apply; m != nil {
		if r.appliedIdx > 0 {
			g.setApplied(r.appliedIdx, r.appliedTrm)
		}
		for _, resp := range m.GetResponses() {
			_ = g.rn.Step(resp)
		}
		g.n.metrics.applied.Add(float64(r.applyCount))
		if k := g.n.cfg.Knobs; k != nil && k.AfterApply != nil {
			k.AfterApply(g.id, g.applied.Load())
		}
		g.releaseReads()
		g.maybeCompact()
	}
	return nil
}

func (g *Group) setApplied(index, term uint64) {
	if index <= g.applied.Load() {
		return
	}
	g.applied.Store(index)
	g.appliedTerm = term
	g.appliedGge.Set(float64(index))
}

// maybeCompact schedules a compaction once SnapshotEntries were applied
// since the last one, keeping SnapshotCatchUpEntries behind the applied
// index in the log.
func (g *Group) maybeCompact() {
	cfg := g.n.cfg
	applied := g.applied.Load()
	if g.compacting || applied < g.store.snapIndex+cfg.SnapshotEntries {
		return
	}
	index := applied - cfg.SnapshotCatchUpEntries
	term, err := g.store.Term(index)
	if err != nil {
		g.log.Warn().Err(err).Uint64("index", index).Msg("compaction skipped")
		return
	}
	g.compacting = true
	if !g.n.w.submit(&writeReq{g: g, compact: &compaction{index: index, term: term}, deferred: true}) {
		g.compacting = false
	}
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
		lead = rd.SoftState.Lead
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
// acknowledged, so it means one of two things. From the current leader at
// the current term, heartbeat after heartbeat: this node's log is older than
// what it acknowledged, and the group stops with ErrStaleLog. Otherwise a
// forged or corrupt message: its commit is lowered to the last index (raft
// ignores a commit that does not advance) and a warning is logged once.
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
	if m.GetFrom() == st.Lead && m.GetTerm() == st.GetTerm() {
		// One such message may be forged; a stale log makes every
		// heartbeat of the leader fail, for as long as it lasts.
		if g.pastLogBeats++; g.pastLogBeats > staleLogHeartbeats(g.n.cfg) {
			return fmt.Errorf("%w: group %d: leader %d commits index %d, this log ends at %d", ErrStaleLog, g.id, m.GetFrom(), m.GetCommit(), last)
		}
	}
	if !g.warnedCommit {
		g.warnedCommit = true
		g.log.Warn().Uint64("from", m.GetFrom()).Uint64("commit", m.GetCommit()).Uint64("last_index", last).
			Msg("heartbeat commits past this node's log from a node that is not its leader: forged or corrupt; ignoring its commit")
	}
	m.Commit = &last
	return nil
}
