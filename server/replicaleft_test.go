package server

import (
	"testing"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// TestReplicaLeft: which of node 1's replicas of partition 1 the
// reconciler deletes. Partition 1 is placed on nodes 2, 3, 4 (node 4 in
// generation 7); its leader recorded voters 2, 3, 4 at index 100.
func TestReplicaLeft(t *testing.T) {
	st := &cluster.State{Placements: []*rpc.PartitionPlacement{{
		Partition: 1, Replicas: []uint64{2, 3, 4}, Generations: map[uint64]uint32{4: 7}, Version: 7,
		ObservedVoters: []uint64{2, 3, 4}, ObservedIndex: 100,
	}}}
	voters := raftlog.Membership{Voters: []uint64{raftlog.ReplicaID(1, 0), 2, 3}}
	for _, c := range []struct {
		name      string
		node      uint64
		replica   uint64
		applied   uint64
		m         raftlog.Membership
		wantLeft  bool
		wantPlace bool
	}{
		// Bug: a replica removed while its node was down kept a
		// configuration holding itself, and was never deleted.
		{"removed while down: the record shows it out past what it applied", 1, raftlog.ReplicaID(1, 0), 50, voters, true, false},
		{"the record is older than what it applied: no proof", 1, raftlog.ReplicaID(1, 0), 150, voters, false, false},
		{"its own configuration left it out", 1, raftlog.ReplicaID(1, 0), 150, raftlog.Membership{Voters: []uint64{2, 3, 4}}, true, false},
		// Bug: a blank replica not placed here (opened at a restart from
		// a stale record) waited for ever for a leader.
		{"blank, not placed here", 1, raftlog.ReplicaID(1, 0), 0, raftlog.Membership{}, true, false},
		{"blank, placed here in another generation", 4, raftlog.ReplicaID(4, 3), 0, raftlog.Membership{}, true, true},
		{"blank, placed here: a learner to be", 4, raftlog.ReplicaID(4, 7), 0, raftlog.Membership{}, false, true},
		{"a voter placed here", 2, 2, 50, raftlog.Membership{Voters: []uint64{2, 3, raftlog.ReplicaID(4, 7)}}, false, true},
	} {
		if got := replicaLeft(st, 1, c.node, c.replica, c.applied, c.m); got != c.wantLeft {
			t.Errorf("%s: replicaLeft %v, want %v", c.name, got, c.wantLeft)
		}
		if got := placedOn(st, 1, c.node); got != c.wantPlace {
			t.Errorf("%s: placedOn %v, want %v", c.name, got, c.wantPlace)
		}
	}
	// Bug: a restart opened a blank replica (generation 0, an id the
	// group had used) on a node only in the recorded configuration.
	st.Placements[0].ObservedVoters = []uint64{1, 2, 3}
	if placedOn(st, 1, 1) {
		t.Error("placedOn: node 1 is only in the recorded configuration, not in the target")
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
