package raftlog

// A stepped node (Knobs.Stepped) runs no goroutine of its own: the test
// asks it what work it has (Pending) and runs one piece at a time
// (RunWork), from one goroutine, with a stepped MemNetwork whose messages
// it delivers itself and a virtual clock (Knobs.Now). Each piece is what
// one turn of a running node's goroutine does: a group's loop turn (its
// inbox drained, one Ready handled: messages sent, the append and the
// applies queued), one log write (records written and fdatasynced, the
// peers' responses sent, the groups told), one applier batch (applied,
// acknowledged, checkpointed when due). With the order of the pieces, the
// messages and the ticks drawn from a seed, a run replays exactly.
//
// Elections are the exception: etcd raft draws each replica's randomized
// election timeout from crypto/rand, so a stepped test keeps ticks below
// the election timeout (or sets ElectionTicks high) and elects by
// Group.Campaign.

// WorkKind names a piece of a stepped node's work.
type WorkKind string

const (
	WorkGroup WorkKind = "group" // a group's loop turn
	WorkWrite WorkKind = "write" // the log writer's next batch
	WorkApply WorkKind = "apply" // the applier's next batch, or a due checkpoint
)

// Work is a piece of a stepped node's work.
type Work struct {
	Kind  WorkKind
	Group GroupID // for WorkGroup
}

// Pending lists the work a stepped node has, in a fixed order: its groups'
// turns by group id, then the log writer's, then the applier's.
func (n *Node) Pending() []Work {
	var out []Work
	for _, g := range n.groupList() {
		if !g.halted() && (g.hasInbox() || g.rn.HasReady()) {
			out = append(out, Work{Kind: WorkGroup, Group: g.id})
		}
	}
	n.lw.mu.Lock()
	if len(n.lw.queue) > 0 || len(n.lw.releases) > 0 {
		out = append(out, Work{Kind: WorkWrite})
	}
	n.lw.mu.Unlock()
	n.ap.mu.Lock()
	queued := len(n.ap.queue) > 0
	n.ap.mu.Unlock()
	if due, _ := n.ap.policy.checkpointDue(n.cfg.Knobs.now(), n.ap.lastCheckpoint, n.ap.tx != nil, n.ap.entries, false); queued || due {
		out = append(out, Work{Kind: WorkApply})
	}
	return out
}

// RunWork runs one piece of a stepped node's work.
func (n *Node) RunWork(w Work) {
	switch w.Kind {
	case WorkGroup:
		if g := n.Group(w.Group); g != nil && !g.halted() {
			g.iterate(n.cfg.Knobs.now())
		}
	case WorkWrite:
		n.lw.runOnce()
	case WorkApply:
		n.ap.runOnce(n.cfg.Knobs.now())
	}
}

// Campaign has this replica start an election at its next loop turn.
func (g *Group) Campaign() bool {
	return g.enqueueControl(func() {
		if err := g.rn.Campaign(); err != nil {
			g.log.Debug().Err(err).Msg("campaign refused")
		}
	})
}

// hasInbox reports whether the group's inbox holds anything.
func (g *Group) hasInbox() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := &g.in
	return len(in.appended)+len(in.applied)+len(in.checkpoints)+len(in.msgs)+len(in.snaps)+
		len(in.reports)+len(in.control)+len(in.reads)+len(in.props)+len(in.confs)+in.ticks > 0 || in.failure != nil
}
