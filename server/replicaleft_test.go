package server

import (
	"testing"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// TestReplicaLeft: the proof that lets a node delete its replica. The
// regression: node 3, moving partition 1's replica to node 4, killed
// after it applied the joint configuration and restarted after the group
// had left it and removed node 3's replica. Its own configuration still
// holds it, and the others drop its messages as a stranger's, so only the
// record (a configuration applied later, without node 3) proves it left;
// without that proof it stayed, campaigning, and node 3 never became
// ready again.
func TestReplicaLeft(t *testing.T) {
	r := func(node uint64, gen uint32) uint64 { return raftlog.ReplicaID(node, gen) }
	self := r(3, 8)
	joint := raftlog.Membership{Voters: []uint64{r(1, 0), r(2, 0), self, r(4, 9)}, Outgoing: []uint64{r(1, 0), r(2, 0), self}}
	after := &rpc.PartitionPlacement{Partition: 1, Replicas: []uint64{1, 2, 4}, ObservedVoters: []uint64{1, 2, 4}, ObservedIndex: 5000}
	for _, tc := range []struct {
		name    string
		pl      *rpc.PartitionPlacement
		m       raftlog.Membership
		applied uint64
		want    bool
	}{
		{"removed while down: the record says so", after, joint, 3568, true},
		{"the record is older than this replica's state", &rpc.PartitionPlacement{Partition: 1, ObservedVoters: []uint64{1, 2, 4}, ObservedIndex: 3000}, joint, 3568, false},
		{"the record still holds this node", &rpc.PartitionPlacement{Partition: 1, ObservedVoters: []uint64{1, 2, 3, 4}, ObservedIndex: 5000}, joint, 3568, false},
		{"the record holds this node as a learner", &rpc.PartitionPlacement{Partition: 1, ObservedVoters: []uint64{1, 2}, ObservedLearners: []uint64{3}, ObservedIndex: 5000}, joint, 3568, false},
		{"nothing recorded yet", &rpc.PartitionPlacement{Partition: 1}, joint, 3568, false},
		{"its own configuration left it", &rpc.PartitionPlacement{Partition: 1}, raftlog.Membership{Voters: []uint64{r(1, 0), r(2, 0), r(4, 9)}}, 3600, true},
		{"a blank replica", after, raftlog.Membership{}, 0, false},
	} {
		if got := replicaLeft(tc.pl, 3, self, tc.m, tc.applied); got != tc.want {
			t.Errorf("%s: replicaLeft = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFinishesMove: before-record and after-record count only the
// report that ends a move (the recorded configuration becomes the
// target), not every report.
func TestFinishesMove(t *testing.T) {
	moving := &rpc.PartitionPlacement{Partition: 1, Replicas: []uint64{1, 2, 4}, ObservedVoters: []uint64{1, 2, 3, 4}}
	settled := &rpc.PartitionPlacement{Partition: 1, Replicas: []uint64{1, 2, 4}, ObservedVoters: []uint64{1, 2, 4}}
	st := func(pl *rpc.PartitionPlacement) *cluster.State {
		return &cluster.State{Placements: []*rpc.PartitionPlacement{pl}}
	}
	for _, tc := range []struct {
		name string
		st   *cluster.State
		obs  *rpc.PartitionPlacement
		want bool
	}{
		{"the target reached", st(moving), &rpc.PartitionPlacement{Partition: 1, ObservedVoters: []uint64{4, 2, 1}}, true},
		{"still joint", st(moving), &rpc.PartitionPlacement{Partition: 1, ObservedVoters: []uint64{1, 2, 4}, ObservedJoint: true}, false},
		{"a learner left", st(moving), &rpc.PartitionPlacement{Partition: 1, ObservedVoters: []uint64{1, 2, 4}, ObservedLearners: []uint64{3}}, false},
		{"a step of the move", st(moving), &rpc.PartitionPlacement{Partition: 1, ObservedVoters: []uint64{1, 2, 3}, ObservedLearners: []uint64{4}}, false},
		{"recorded already", st(settled), &rpc.PartitionPlacement{Partition: 1, ObservedVoters: []uint64{1, 2, 4}}, false},
		{"no such partition", st(moving), &rpc.PartitionPlacement{Partition: 2, ObservedVoters: []uint64{1, 2, 4}}, false},
	} {
		if got := finishesMove(tc.st, tc.obs); got != tc.want {
			t.Errorf("%s: finishesMove = %v, want %v", tc.name, got, tc.want)
		}
	}
}
