package raftlog

import (
	"context"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// Configuration changes (ConfChangeV2), in four steps a caller (the
// cluster's controller) drives one at a time per group, each idempotent on
// the applied configuration so that whoever drives after a crash can
// continue: AddLearner, Promote (enter a joint configuration in which a
// learner becomes a voter and, optionally, a voter becomes a learner),
// LeaveJoint, RemoveReplica. Every change carries the configuration it
// expects (a compare-and-swap): the applier checks it against the applied
// configuration, on every replica alike, so two controllers, or a stale
// one, never both act. Raft itself allows one change in flight.

// Names of the steps (Knobs.AtConfChange is called with "before-",
// "applied-" and "after-" each of them).
const (
	confAddLearner = "add-learner"
	confEnterJoint = "enter-joint"
	confLeaveJoint = "leave-joint"
	confRemove     = "remove"
	confOther      = "conf-change"
)

// confResult is the applier's outcome of one configuration change entry.
type confResult struct {
	index, term uint64
	kind        string
	cc          *pb.ConfChangeV2
	// next is the configuration now applied; nil when the change was
	// refused (err says why) and nothing changed.
	next *pb.ConfState
	err  error
}

// confKind names the step cc is.
func confKind(cc *pb.ConfChangeV2) string {
	if cc.LeaveJoint() {
		return confLeaveJoint
	}
	if _, joint := cc.EnterJoint(); joint {
		return confEnterJoint
	}
	if ch := cc.GetChanges(); len(ch) == 1 {
		switch ch[0].GetType() {
		case pb.ConfChangeAddLearnerNode:
			return confAddLearner
		case pb.ConfChangeRemoveNode:
			return confRemove
		}
	}
	return confOther
}

// applyConfChange applies configuration change entry e to the group's
// meta bucket (in the applier's transaction): the change's expected
// configuration (its Context) must be the applied one, and raft must
// accept the change on it; then the new configuration is written. A
// refused change changes nothing and is reported in the result; only a
// storage error or an undecodable entry is an error. Deterministic: every
// replica decides the same from the same applied configuration.
func applyConfChange(meta *bolt.Bucket, e *pb.Entry) (confResult, error) {
	res := confResult{index: e.GetIndex(), term: e.GetTerm()}
	var cc pb.ConfChangeI
	if e.GetType() == pb.EntryConfChange {
		v1 := &pb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), v1); err != nil {
			return res, fmt.Errorf("configuration change at %d: %w: %w", e.GetIndex(), errCorrupt, err)
		}
		cc = v1
	} else {
		v2 := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), v2); err != nil {
			return res, fmt.Errorf("configuration change at %d: %w: %w", e.GetIndex(), errCorrupt, err)
		}
		cc = v2
	}
	res.cc = cc.AsV2()
	res.kind = confKind(res.cc)
	cur := &pb.ConfState{}
	if err := proto.Unmarshal(meta.Get(keyConf), cur); err != nil {
		return res, fmt.Errorf("conf state: %w: %w", errCorrupt, err)
	}
	if ctx := res.cc.GetContext(); len(ctx) > 0 {
		expect := &pb.ConfState{}
		if err := proto.Unmarshal(ctx, expect); err != nil {
			res.err = fmt.Errorf("%w: undecodable expected configuration", ErrConfChangeRefused)
			return res, nil
		}
		if !membershipOf(expect).Equal(membershipOf(cur)) {
			res.err = fmt.Errorf("%w: expected %v, applied %v", ErrConfigChanged, membershipOf(expect), membershipOf(cur))
			return res, nil
		}
	}
	next, err := nextConf(cur, res.cc)
	if err != nil {
		res.err = err
		return res, nil
	}
	res.next = next
	return res, putConf(meta, next)
}

// confWait is a configuration change this node proposed, waiting for its
// outcome.
type confWait struct {
	term  uint64
	reply chan confOutcome
}

type confOutcome struct {
	conf Membership
	err  error
}

// confProposal is a configuration change for the group's loop to propose.
type confProposal struct {
	ctx context.Context
	cc  *pb.ConfChangeV2
	// check runs on the loop, on the leader, just before the change is
	// proposed; an error refuses it.
	check func() error
	// accepted receives where the entry landed, or an error; then, for an
	// accepted change, wait receives its outcome.
	accepted chan proposeResult
	wait     *confWait
}

// errLeaderMustMove: the change removes or demotes the leader's own
// replica; leadership moves first.
var errLeaderMustMove = errors.New("raftlog: the leader's own replica changes; transfer leadership first")

// Membership is the configuration applied on this replica.
func (g *Group) Membership() Membership { return *g.conf.Load() }

// Removed is closed once this replica knows it is no longer a member of
// the group (ErrRemoved): the group has stopped.
func (g *Group) Removed() <-chan struct{} { return g.removedc }

// AddLearner adds replica (a replica id never used in this group before:
// see ReplicaID) as a learner: it gets the log, or a snapshot, and counts
// toward no quorum. The node that hosts it starts it with JoinGroup.
// Called on the leader; expect is the configuration the caller saw. It
// returns the applied configuration; done already (replica is a learner)
// is success.
func (g *Group) AddLearner(ctx context.Context, expect Membership, replica uint64) (Membership, error) {
	return g.changeConf(ctx, expect, confAddLearner,
		func(m Membership) bool { return slices.Contains(m.Learners, replica) },
		func(m Membership) error {
			if r := m.Replica(NodeOf(replica)); r != 0 {
				return fmt.Errorf("%w: node %d already has replica %#x in group %d", ErrConfChangeRefused, NodeOf(replica), r, g.id)
			}
			return nil
		},
		nil,
		singleChange(pb.ConfChangeAddLearnerNode, replica))
}

// Promote enters a joint configuration in which learner becomes a voter
// and, when demote is not 0, voter demote becomes a learner (it leaves the
// voters with LeaveJoint, and the group with RemoveReplica). The learner
// must be caught up: replicating, recently active, and no further behind
// the leader's last index than Config.SnapshotCatchUpEntries (what a
// follower catches up from the log alone), so that promoting it does not
// make the group wait on a snapshot; otherwise ErrNotCaughtUp. If demote
// is the leader's own replica, leadership moves to another voter first and
// the call fails with *NotLeaderError: call again on the new leader. Done
// already (the joint configuration, or what leaving it made) is success.
func (g *Group) Promote(ctx context.Context, expect Membership, learner, demote uint64) (Membership, error) {
	changes := []*pb.ConfChangeSingle{{Type: pb.ConfChangeAddNode.Enum(), NodeId: new(learner)}}
	if demote != 0 {
		changes = append(changes, &pb.ConfChangeSingle{Type: pb.ConfChangeAddLearnerNode.Enum(), NodeId: new(demote)})
	}
	cc := &pb.ConfChangeV2{Transition: pb.ConfChangeTransitionJointExplicit.Enum(), Changes: changes}
	return g.changeConf(ctx, expect, confEnterJoint,
		func(m Membership) bool {
			return slices.Contains(m.Voters, learner) && (demote == 0 || !slices.Contains(m.Voters, demote))
		},
		func(m Membership) error {
			switch {
			case m.Joint():
				return fmt.Errorf("%w: group %d is in a joint configuration already; leave it first", ErrConfChangeRefused, g.id)
			case !slices.Contains(m.Learners, learner):
				return fmt.Errorf("%w: %#x is not a learner of group %d", ErrConfChangeRefused, learner, g.id)
			case demote != 0 && !slices.Contains(m.Voters, demote):
				return fmt.Errorf("%w: %#x is not a voter of group %d", ErrConfChangeRefused, demote, g.id)
			}
			return nil
		},
		func() error {
			if demote == g.self {
				return errLeaderMustMove
			}
			return g.caughtUp(learner)
		},
		cc)
}

// LeaveJoint leaves the joint configuration Promote entered. Not in one
// is success.
func (g *Group) LeaveJoint(ctx context.Context, expect Membership) (Membership, error) {
	return g.changeConf(ctx, expect, confLeaveJoint,
		func(m Membership) bool { return !m.Joint() },
		func(Membership) error { return nil },
		nil,
		&pb.ConfChangeV2{})
}

// RemoveReplica removes replica from the group (a learner, or a voter
// outside a joint configuration). If it is the leader's own replica,
// leadership moves first and the call fails with *NotLeaderError: call
// again on the new leader. Not a member is success.
func (g *Group) RemoveReplica(ctx context.Context, expect Membership, replica uint64) (Membership, error) {
	return g.changeConf(ctx, expect, confRemove,
		func(m Membership) bool { return !m.Contains(replica) },
		func(m Membership) error {
			if m.Joint() {
				return fmt.Errorf("%w: group %d is in a joint configuration; leave it first", ErrConfChangeRefused, g.id)
			}
			return nil
		},
		func() error {
			if replica == g.self {
				return errLeaderMustMove
			}
			return nil
		},
		singleChange(pb.ConfChangeRemoveNode, replica))
}

func singleChange(t pb.ConfChangeType, replica uint64) *pb.ConfChangeV2 {
	return &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(replica)}}}
}

// changeConf is one step: done (on the applied configuration) is success
// at once; otherwise the configuration must be expect, valid says whether
// the step makes sense on it, and check runs on the leader's loop before
// the change is proposed with expect as its compare-and-swap. It waits
// until the change is applied here and returns the new configuration.
func (g *Group) changeConf(ctx context.Context, expect Membership, kind string, done func(Membership) bool, valid func(Membership) error, check func() error, cc *pb.ConfChangeV2) (Membership, error) {
	cur := g.Membership()
	if done(cur) {
		return cur, nil
	}
	if !cur.Equal(expect) {
		return cur, fmt.Errorf("%w: group %d: expected %v, applied %v", ErrConfigChanged, g.id, expect, cur)
	}
	if err := valid(cur); err != nil {
		return cur, err
	}
	if k := g.n.cfg.Knobs; k != nil && k.AtConfChange != nil {
		if err := k.AtConfChange(g.id, "before-"+kind); err != nil {
			return cur, err
		}
	}
	ctxData, err := proto.Marshal(cur.confState())
	if err != nil {
		return cur, err
	}
	cc.Context = ctxData
	if err := ctx.Err(); err != nil {
		return cur, err
	}
	if ev := g.leader.Load(); !ev.IsSelf {
		return cur, &NotLeaderError{Group: g.id, Leader: ev.Leader, Term: ev.Term}
	}
	p := &confProposal{ctx: ctx, cc: cc, check: check, accepted: make(chan proposeResult, 1),
		wait: &confWait{reply: make(chan confOutcome, 1)}}
	if !g.enqueue(func(in *inbox) { in.confs = append(in.confs, p) }) {
		return cur, ErrStopped
	}
	var r proposeResult
	select {
	case r = <-p.accepted:
	case <-ctx.Done():
		return cur, ctx.Err()
	case <-g.done:
		return cur, ErrStopped
	}
	if errors.Is(r.err, errLeaderMustMove) {
		return cur, g.moveLeadership(ctx)
	}
	if r.err != nil {
		return cur, r.err
	}
	select {
	case out := <-p.wait.reply:
		return out.conf, out.err
	case <-ctx.Done():
		return cur, ctx.Err()
	case <-g.done:
		return g.Membership(), ErrStopped
	}
}

// moveLeadership hands the leadership to another voter before a change
// of the leader's own replica, and answers the caller where to go next.
func (g *Group) moveLeadership(ctx context.Context) error {
	to := g.transferTarget()
	if to == 0 {
		return fmt.Errorf("%w: group %d: no other voter to hand the leadership to", ErrConfChangeRefused, g.id)
	}
	if err := g.TransferLeadership(ctx, to); err != nil {
		return err
	}
	ev := g.leader.Load()
	return &NotLeaderError{Group: g.id, Leader: ev.Leader, Term: ev.Term}
}

// caughtUp says, on the leader's loop, whether learner may be promoted.
func (g *Group) caughtUp(learner uint64) error {
	st := g.rn.Status()
	if st.RaftState != raft.StateLeader {
		return &NotLeaderError{Group: g.id, Leader: NodeOf(st.Lead), Term: st.GetTerm()}
	}
	pr, ok := st.Progress[learner]
	last := g.lastAppended
	switch {
	case !ok:
		return fmt.Errorf("%w: %#x has no progress on the leader", ErrNotCaughtUp, learner)
	case pr.State != tracker.StateReplicate || !pr.RecentActive:
		return fmt.Errorf("%w: %#x is %s (recently active: %v)", ErrNotCaughtUp, learner, pr.State, pr.RecentActive)
	case last > pr.Match+g.n.cfg.SnapshotCatchUpEntries:
		return fmt.Errorf("%w: %#x has %d of %d entries", ErrNotCaughtUp, learner, pr.Match, last)
	}
	return nil
}

// proposeConf runs on the loop: each change, if this replica leads and
// its check passes, is stepped into raft. Where it landed is learnt from
// the next Ready (answerAccepted), as for proposals, so it goes before
// them.
func (g *Group) proposeConf(ps []*confProposal) {
	for _, p := range ps {
		switch {
		case p.ctx.Err() != nil:
			p.accepted <- proposeResult{err: p.ctx.Err()}
			continue
		case !g.isLeader:
			ev := g.leader.Load()
			p.accepted <- proposeResult{err: &NotLeaderError{Group: g.id, Leader: ev.Leader, Term: ev.Term}}
			continue
		}
		if p.check != nil {
			if err := p.check(); err != nil {
				p.accepted <- proposeResult{err: err}
				continue
			}
		}
		if err := g.rn.ProposeConfChange(p.cc); err != nil {
			p.accepted <- proposeResult{err: g.proposalError(err)}
			continue
		}
		g.accepted = append(g.accepted, &proposal{ctx: p.ctx, reply: p.accepted, conf: p.wait})
	}
}

// confApplied runs on the loop for each configuration change the applier
// applied (durably: the checkpoint is done): raft applies it too and must
// agree, then the proposer, if any, hears the outcome.
func (g *Group) confApplied(res confResult) error {
	var out confOutcome
	if res.next != nil {
		if k := g.n.cfg.Knobs; k != nil && k.AtConfChange != nil {
			if err := k.AtConfChange(g.id, "after-"+res.kind); err != nil {
				return err
			}
		}
		cs := g.rn.ApplyConfChange(res.cc)
		if !membershipOf(cs).Equal(membershipOf(res.next)) {
			return fmt.Errorf("raftlog: group %d: raft applied configuration %v at %d, the applier %v", g.id, membershipOf(cs), res.index, membershipOf(res.next))
		}
		g.setConf(res.next)
		g.store.conf = res.next
		g.log.Info().Str("step", res.kind).Uint64("index", res.index).Any("configuration", membershipOf(res.next)).Msg("configuration changed")
	} else {
		out.err = res.err
		g.log.Info().Err(res.err).Str("step", res.kind).Uint64("index", res.index).Msg("configuration change refused")
	}
	out.conf = g.Membership()
	if w := g.confWaits[res.index]; w != nil {
		delete(g.confWaits, res.index)
		if w.term != res.term {
			out.err = ErrProposalDropped
		}
		w.reply <- out
	}
	if res.next != nil && !g.conf.Load().Contains(g.self) {
		return ErrRemoved
	}
	return nil
}

// dropConfWaits answers the proposers of changes whose index was applied
// without them (another leader's entry took the index).
func (g *Group) dropConfWaits(applied uint64) {
	for idx, w := range g.confWaits {
		if idx <= applied {
			delete(g.confWaits, idx)
			w.reply <- confOutcome{conf: g.Membership(), err: ErrProposalDropped}
		}
	}
}

// setConf publishes cs as the applied configuration and recomputes what
// depends on it (the preferred leader; none while the group is joint:
// balancing waits until a change is over).
func (g *Group) setConf(cs *pb.ConfState) {
	m := membershipOf(cs)
	g.conf.Store(&m)
	g.preferred = 0
	if g.n.cfg.LeaderBalanceTicks > 0 && len(m.Voters) > 1 && !m.Joint() {
		g.preferred = m.Replica(PreferredLeader(g.id, m.voterNodes()))
	}
}
