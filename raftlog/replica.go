package raftlog

import (
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/confchange"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// A replica's Raft id in a group is ReplicaID(node, generation): the node
// id in the low 32 bits, the generation above. A node that leaves a group
// and is added back comes back under a higher generation, so to raft it is
// a new replica: an acknowledgement its old incarnation sent and the
// network delayed can never count toward a quorum. Every replica of a
// group bootstrapped from its voters has generation 0, so its Raft id is
// its node id, as before replica ids existed.

// maxNodeID is the largest node id: node ids fill the low 32 bits of a
// replica id.
const maxNodeID = 1<<32 - 1

// ReplicaID is the Raft id of node's replica of generation gen in a group.
func ReplicaID(node uint64, gen uint32) uint64 { return uint64(gen)<<32 | node&maxNodeID }

// NodeOf is the node a replica id lives on.
func NodeOf(replica uint64) uint64 { return replica & maxNodeID }

// GenerationOf is a replica id's generation.
func GenerationOf(replica uint64) uint32 { return uint32(replica >> 32) }

// Membership is a group's configuration as a replica applied it, in
// replica ids (sorted). Outside a joint configuration Outgoing and
// LearnersNext are empty. In one (a voter being replaced), a decision
// needs a majority of Voters and a majority of Outgoing, and LearnersNext
// are voters of Outgoing that become learners when it is left.
type Membership struct {
	Voters       []uint64
	Learners     []uint64
	Outgoing     []uint64
	LearnersNext []uint64
}

func membershipOf(cs *pb.ConfState) Membership {
	sorted := func(ids []uint64) []uint64 {
		if len(ids) == 0 {
			return nil
		}
		return slices.Sorted(slices.Values(ids))
	}
	return Membership{
		Voters:       sorted(cs.GetVoters()),
		Learners:     sorted(cs.GetLearners()),
		Outgoing:     sorted(cs.GetVotersOutgoing()),
		LearnersNext: sorted(cs.GetLearnersNext()),
	}
}

func (m Membership) confState() *pb.ConfState {
	return &pb.ConfState{Voters: m.Voters, Learners: m.Learners, VotersOutgoing: m.Outgoing, LearnersNext: m.LearnersNext}
}

// Equal says whether m and o are the same configuration.
func (m Membership) Equal(o Membership) bool {
	return slices.Equal(m.Voters, o.Voters) && slices.Equal(m.Learners, o.Learners) &&
		slices.Equal(m.Outgoing, o.Outgoing) && slices.Equal(m.LearnersNext, o.LearnersNext)
}

// blank says whether m is no configuration at all: a replica that joined
// and has not had its first snapshot.
func (m Membership) blank() bool {
	return len(m.Voters) == 0 && len(m.Learners) == 0 && len(m.Outgoing) == 0 && len(m.LearnersNext) == 0
}

// Joint says whether m is a joint configuration.
func (m Membership) Joint() bool { return len(m.Outgoing) > 0 }

// Contains says whether replica has any role in m.
func (m Membership) Contains(replica uint64) bool {
	return slices.Contains(m.Voters, replica) || slices.Contains(m.Learners, replica) ||
		slices.Contains(m.Outgoing, replica) || slices.Contains(m.LearnersNext, replica)
}

// Replica is node's replica id in m, 0 when the node has none.
func (m Membership) Replica(node uint64) uint64 {
	for _, ids := range [][]uint64{m.Voters, m.Outgoing, m.Learners, m.LearnersNext} {
		for _, r := range ids {
			if NodeOf(r) == node {
				return r
			}
		}
	}
	return 0
}

// Role is what a replica is in m: "voter", "incoming" (a voter that joins
// with the joint configuration), "outgoing" (a voter that leaves with it),
// "learner", or "" when it is not a member.
func (m Membership) Role(replica uint64) string {
	in, out := slices.Contains(m.Voters, replica), slices.Contains(m.Outgoing, replica)
	switch {
	case in && (out || !m.Joint()):
		return "voter"
	case in:
		return "incoming"
	case out:
		return "outgoing"
	case slices.Contains(m.Learners, replica) || slices.Contains(m.LearnersNext, replica):
		return "learner"
	}
	return ""
}

// voterNodes are the nodes of m's (incoming) voters.
func (m Membership) voterNodes() []uint64 {
	out := make([]uint64, 0, len(m.Voters))
	for _, r := range m.Voters {
		out = append(out, NodeOf(r))
	}
	slices.Sort(out)
	return out
}

// removedFrom is whether replica is known to have left m: another
// generation of its node is a member (ids are never reused, so an older
// one was removed; a newer one that is not a member yet cannot be sending).
func (m Membership) removedFrom(replica uint64) bool {
	if m.Contains(replica) {
		return false
	}
	other := m.Replica(NodeOf(replica))
	return other != 0 && GenerationOf(other) > GenerationOf(replica)
}

// supersededBy reports whether replica is a newer generation of a node
// whose replica m holds: the group replaced that replica after m.
func (m Membership) supersededBy(replica uint64) bool {
	other := m.Replica(NodeOf(replica))
	return other != 0 && GenerationOf(replica) > GenerationOf(other)
}

var (
	// ErrConfigChanged: the group's applied configuration is not the one a
	// configuration change expected (another change came first). Nothing
	// changed; read Membership again and decide again.
	ErrConfigChanged = errors.New("raftlog: configuration changed meanwhile")
	// ErrConfChangeRefused: the change is not valid on the applied
	// configuration (for example it would leave no voter).
	ErrConfChangeRefused = errors.New("raftlog: configuration change refused")
	// ErrNotCaughtUp: a learner to promote is not replicating close enough
	// behind the leader yet; retry later.
	ErrNotCaughtUp = errors.New("raftlog: learner not caught up")
	// ErrRemoved: this replica is no longer a member of the group: it
	// applied its own removal, or a member refused its messages as those of
	// a removed replica. The group has stopped; RemoveGroup deletes it.
	ErrRemoved = errors.New("raftlog: replica removed from the group")
)

// nextConf computes the configuration cc makes of cs, as raft's own
// applyConfChange does (confchange.Changer), or an error (wrapping
// ErrConfChangeRefused) when raft would refuse it. Raft panics on a change
// it refuses, so the applier decides first, on every replica alike.
func nextConf(cs *pb.ConfState, cc *pb.ConfChangeV2) (*pb.ConfState, error) {
	chg := confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: 1}
	cfg, trk, err := confchange.Restore(chg, cs)
	if err != nil {
		return nil, fmt.Errorf("%w: restore %v: %v", ErrConfChangeRefused, cs, err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	switch autoLeave, joint := cc.EnterJoint(); {
	case cc.LeaveJoint():
		cfg, trk, err = chg.LeaveJoint()
	case joint:
		cfg, trk, err = chg.EnterJoint(autoLeave, cc.GetChanges()...)
	default:
		cfg, trk, err = chg.Simple(cc.GetChanges()...)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfChangeRefused, err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	next := chg.Tracker.ConfState()
	return next, nil
}
