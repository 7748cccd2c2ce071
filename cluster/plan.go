package cluster

import (
	"slices"

	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// The planner is pure: from the cluster record and a group's applied
// configuration it names the next configuration change, one at a time,
// each idempotent on the configuration it was planned from (raftlog
// applies it only if the configuration is still that one). Whoever runs it
// after a crash continues where the last step left off.
//
// Every group has a replica on every node that is joining or active (the
// replication factor is the node count); a draining or removed node holds
// none. A joining node's replicas start as learners and are promoted once
// caught up (raftlog refuses to promote one that is not); a node that
// replaces another (--replace) is a joiner like any other, and the node it
// replaces is drained once it is active.

// StepKind is a configuration change of one group.
type StepKind int

const (
	// StepNone: the group has the configuration it should have.
	StepNone StepKind = iota
	// StepAddLearner adds Replica as a learner.
	StepAddLearner
	// StepPromote makes learner Replica a voter.
	StepPromote
	// StepLeaveJoint leaves a joint configuration.
	StepLeaveJoint
	// StepRemove removes Replica (a learner, or a voter).
	StepRemove
)

func (k StepKind) String() string {
	return [...]string{"none", "add-learner", "promote", "leave-joint", "remove"}[k]
}

// GroupStep is the next configuration change of one group.
type GroupStep struct {
	Kind    StepKind
	Replica uint64
}

// wanted reports whether node n should hold a replica of every group.
func wanted(s *State, node uint64) bool {
	n, ok := s.Node(node)
	return ok && (n.State == rpc.NodeState_NODE_STATE_JOINING || n.State == rpc.NodeState_NODE_STATE_ACTIVE)
}

// PlanGroup returns the next change of a group whose applied configuration
// is m. Learners that should not be there go first (they cost nothing to
// remove), then new learners, then promotions, and voters last, one at a
// time and never the last voter, so the group gains before it loses. A
// record not initialised yet plans nothing.
func PlanGroup(s *State, m raftlog.Membership) GroupStep {
	if s.ID == nil {
		return GroupStep{}
	}
	if m.Joint() {
		return GroupStep{Kind: StepLeaveJoint}
	}
	for _, r := range m.Learners {
		if !wanted(s, raftlog.NodeOf(r)) {
			return GroupStep{Kind: StepRemove, Replica: r}
		}
	}
	for _, n := range s.Nodes {
		if wanted(s, n.Id) && m.Replica(n.Id) == 0 {
			return GroupStep{Kind: StepAddLearner, Replica: raftlog.ReplicaID(n.Id, 0)}
		}
	}
	for _, r := range m.Learners {
		return GroupStep{Kind: StepPromote, Replica: r} // wanted: the others went first
	}
	if len(m.Voters) > 1 {
		for _, r := range m.Voters {
			if !wanted(s, raftlog.NodeOf(r)) {
				return GroupStep{Kind: StepRemove, Replica: r}
			}
		}
	}
	return GroupStep{}
}

// NodeStep is a change of a node's state for the metadata leader to
// propose.
type NodeStep struct {
	ID       uint64
	From, To rpc.NodeState
}

// PlanNodes returns the node state changes the groups' configurations
// (every group of the cluster, as applied on the metadata leader) allow: a
// joining node that is a voter of every group becomes active; the node an
// active node replaces starts draining; a draining node that holds no
// replica any more is removed.
func PlanNodes(s *State, groups []raftlog.Membership) []NodeStep {
	if s.ID == nil {
		return nil
	}
	var steps []NodeStep
	for _, n := range s.Nodes {
		switch n.State {
		case rpc.NodeState_NODE_STATE_JOINING:
			if len(groups) > 0 && !slices.ContainsFunc(groups, func(m raftlog.Membership) bool {
				return m.Joint() || !slices.Contains(m.Voters, m.Replica(n.Id))
			}) {
				steps = append(steps, NodeStep{n.Id, n.State, rpc.NodeState_NODE_STATE_ACTIVE})
			}
		case rpc.NodeState_NODE_STATE_ACTIVE:
			if n.Replaces == 0 {
				continue
			}
			if old, ok := s.Node(n.Replaces); ok && old.State == rpc.NodeState_NODE_STATE_ACTIVE {
				steps = append(steps, NodeStep{old.Id, old.State, rpc.NodeState_NODE_STATE_DRAINING})
			}
		case rpc.NodeState_NODE_STATE_DRAINING:
			if !slices.ContainsFunc(groups, func(m raftlog.Membership) bool { return m.Replica(n.Id) != 0 }) {
				steps = append(steps, NodeStep{n.Id, n.State, rpc.NodeState_NODE_STATE_REMOVED})
			}
		}
	}
	return steps
}
