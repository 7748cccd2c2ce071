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

// wanted reports whether node is joining or active.
func wanted(s *State, node uint64) bool {
	n, ok := s.Node(node)
	return ok && (n.State == rpc.NodeState_NODE_STATE_JOINING || n.State == rpc.NodeState_NODE_STATE_ACTIVE)
}

// wantedIn reports whether node should hold a replica of group: one of
// the partition's target replicas, or for the metadata group (and a
// partition placed nowhere yet) any joining or active node.
func wantedIn(s *State, group uint32, node uint64) bool {
	if !wanted(s, node) {
		return false
	}
	if group == 0 {
		return true
	}
	pl, ok := s.Placement(group)
	return !ok || len(pl.Replicas) == 0 || slices.Contains(pl.Replicas, node)
}

// MaxMetaVoters caps the metadata group's voters: every node keeps a
// replica of it (each reads the registry and the record locally), but a
// quorum of five is enough, and a larger one costs every write more. The
// other nodes are learners, promoted as voters leave. Voters are never
// demoted to make room: a configuration only grows to the cap.
const MaxMetaVoters = 5

// WantedReplica reports whether replica r should be in group: its node is
// wanted there, in the generation the target gives it.
func WantedReplica(s *State, group uint32, r uint64) bool { return wantedReplica(s, group, r) }

func wantedReplica(s *State, group uint32, r uint64) bool {
	node := raftlog.NodeOf(r)
	return wantedIn(s, group, node) && raftlog.GenerationOf(r) == s.Generation(group, node)
}

// PlanGroup returns the next change of group whose applied configuration
// is m. Learners that should not be there go first (they cost nothing to
// remove), then new learners, then promotions, and voters last, one at a
// time and never the last one, so the group gains before it loses. A
// record not initialised yet plans nothing.
func PlanGroup(s *State, group uint32, m raftlog.Membership) GroupStep {
	if s.ID == nil {
		return GroupStep{}
	}
	if m.Joint() {
		return GroupStep{Kind: StepLeaveJoint}
	}
	for _, r := range m.Learners {
		if !wantedReplica(s, group, r) {
			return GroupStep{Kind: StepRemove, Replica: r}
		}
	}
	for _, n := range s.Nodes {
		if wantedIn(s, group, n.Id) && m.Replica(n.Id) == 0 {
			return GroupStep{Kind: StepAddLearner, Replica: raftlog.ReplicaID(n.Id, s.Generation(group, n.Id))}
		}
	}
	for _, r := range m.Learners {
		if group == 0 && len(m.Voters) >= MaxMetaVoters {
			break // the metadata group keeps its voters to five, learners beyond
		}
		return GroupStep{Kind: StepPromote, Replica: r} // wanted: the others went first
	}
	if len(m.Voters) > 1 {
		for _, r := range m.Voters {
			if !wantedReplica(s, group, r) {
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

// PlanNodes returns the node state changes the groups' configurations,
// as their leaders recorded them (ObserveConfig), allow: a joining node
// that is a voter of every group placed on it (the metadata group
// included) becomes active; the node an active node replaces starts
// draining; a draining node that no group counts any more is removed.
// Until every group has recorded its configuration, nothing moves.
func PlanNodes(s *State) []NodeStep {
	if s.ID == nil || !allObserved(s) {
		return nil
	}
	var steps []NodeStep
	for _, n := range s.Nodes {
		switch n.State {
		case rpc.NodeState_NODE_STATE_JOINING:
			if !slices.ContainsFunc(s.Placements, func(pl *rpc.PartitionPlacement) bool {
				if !wantedIn(s, pl.Partition, n.Id) {
					return false
				}
				if pl.Partition == 0 && len(pl.ObservedVoters) >= MaxMetaVoters && slices.Contains(pl.ObservedLearners, n.Id) {
					return false // a learner of a metadata group at its cap is a full member
				}
				return pl.ObservedJoint || !slices.Contains(pl.ObservedVoters, n.Id)
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
			if !slices.ContainsFunc(s.Placements, func(pl *rpc.PartitionPlacement) bool {
				return slices.Contains(pl.ObservedVoters, n.Id) || slices.Contains(pl.ObservedLearners, n.Id)
			}) {
				steps = append(steps, NodeStep{n.Id, n.State, rpc.NodeState_NODE_STATE_REMOVED})
			}
		}
	}
	return steps
}

// allObserved reports whether the metadata group and every placed
// partition have recorded their configuration.
func allObserved(s *State) bool {
	meta, ok := s.Placement(0)
	if !ok || len(meta.ObservedVoters) == 0 {
		return false
	}
	return !slices.ContainsFunc(s.Placements, func(pl *rpc.PartitionPlacement) bool { return len(pl.ObservedVoters) == 0 })
}
