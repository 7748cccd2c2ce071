package cluster

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/rpc"
)

// TestPlacementConverges runs random clusters (seeded: the subtest's name
// is the seed) through the placement planner until it plans nothing more:
// the partitions' configurations follow their targets a round late, as
// their leaders would. The end state: every partition on min(R, eligible)
// distinct active, live nodes; zones within their share where that is
// possible; with one zone, replicas and preferred leaders per node within
// one of even; and no more than maxMoves partitions moving for balance at
// once.
func TestPlacementConverges(t *testing.T) {
	for seed := uint64(1); seed <= 400; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { placementConverges(t, seed) })
	}
}

func placementConverges(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	n := 1 + rng.IntN(8)
	zones := 1 + rng.IntN(3)
	r := 1 + rng.IntN(5)
	parts := 1 + rng.IntN(12)
	s := &State{ID: bytes.Repeat([]byte{1}, ClusterIDLen), Replication: uint32(r)}
	deadSet := map[uint64]bool{}
	for id := uint64(1); id <= uint64(n); id++ {
		st := active
		switch rng.IntN(8) {
		case 0:
			st = draining
		case 1:
			deadSet[id] = true
		}
		s.insert(&rpc.ClusterNode{Id: id, State: st, Zone: fmt.Sprintf("z%d", rng.IntN(zones))})
	}
	dead := func(id uint64) bool { return deadSet[id] }
	// Bootstrap placement: every partition on the first nodes.
	first := min(r, n)
	for p := uint32(1); p <= uint32(parts); p++ {
		var reps []uint64
		for id := uint64(1); id <= uint64(first); id++ {
			reps = append(reps, id)
		}
		s.setPlacement(&rpc.PartitionPlacement{Partition: p, Replicas: reps, Version: 1, ObservedVoters: slices.Clone(reps)})
	}
	const maxMoves = 2
	for round := 0; ; round++ {
		if round > 500 {
			t.Fatalf("seed %d: no convergence after 500 rounds", seed)
		}
		// Last round's targets become the observed configurations.
		for i, pl := range s.Placements {
			cp := proto.Clone(pl).(*rpc.PartitionPlacement)
			cp.ObservedVoters = slices.Clone(cp.Replicas)
			s.Placements[i] = cp
		}
		plan := PlanPlacement(s, Liveness{Dead: dead, Down: dead}, maxMoves)
		if len(plan) == 0 {
			break
		}
		for _, pl := range plan {
			cur, _ := s.Placement(pl.Partition)
			if pl.Version != cur.Version {
				t.Fatalf("seed %d: planned version %d of partition %d, stored %d", seed, pl.Version, pl.Partition, cur.Version)
			}
			cp := proto.Clone(cur).(*rpc.PartitionPlacement)
			cp.Replicas, cp.PreferredLeader, cp.Version = slices.Clone(pl.Replicas), pl.PreferredLeader, cp.Version+1
			s.setPlacement(cp)
		}
		if again := PlanPlacement(s, Liveness{Dead: dead, Down: dead}, maxMoves); !s.Paused && moving(s) > maxMoves && len(again) > 0 {
			// Repairs may exceed the bound; balance must not add to them.
			for _, pl := range again {
				cur, _ := s.Placement(pl.Partition)
				if settled(cur) && !sameSet(pl.Replicas, cur.Replicas) && repairsDone(s, cur, dead) {
					t.Fatalf("seed %d: a balance move planned while %d partitions move", seed, moving(s))
				}
			}
		}
	}

	var eligible []uint64
	zoneNodes := map[string]int{}
	for _, node := range s.Nodes {
		if node.State == active && !deadSet[node.Id] {
			eligible = append(eligible, node.Id)
			zoneNodes[node.Zone]++
		}
	}
	if len(eligible) == 0 {
		return
	}
	want := min(r, len(eligible))
	zoneCap := (want + len(zoneNodes) - 1) / len(zoneNodes)
	feasible := 0
	for _, c := range zoneNodes {
		feasible += min(c, zoneCap)
	}
	load, leads := map[uint64]int{}, map[uint64]int{}
	for _, pl := range s.Placements {
		reps := pl.Replicas
		if len(reps) != want || len(slices.Compact(slices.Sorted(slices.Values(reps)))) != want {
			t.Fatalf("seed %d: partition %d on %v, want %d distinct nodes", seed, pl.Partition, reps, want)
		}
		perZone := map[string]int{}
		for _, id := range reps {
			if !slices.Contains(eligible, id) {
				t.Fatalf("seed %d: partition %d on node %d, which is not eligible", seed, pl.Partition, id)
			}
			load[id]++
			node, _ := s.Node(id)
			perZone[node.Zone]++
		}
		for z, c := range perZone {
			if feasible >= want && c > zoneCap {
				t.Fatalf("seed %d: partition %d has %d replicas in zone %s, share %d", seed, pl.Partition, c, z, zoneCap)
			}
		}
		if !slices.Contains(reps, pl.PreferredLeader) {
			t.Fatalf("seed %d: partition %d prefers node %d, not a replica of %v", seed, pl.Partition, pl.PreferredLeader, reps)
		}
		leads[pl.PreferredLeader]++
	}
	if len(zoneNodes) == 1 {
		if lo, hi := spread(eligible, load); hi-lo > 1 {
			t.Fatalf("seed %d: replicas per node from %d to %d: %v", seed, lo, hi, load)
		}
		if lo, hi := spread(eligible, leads); hi-lo > 1 && len(s.Placements) >= len(eligible) {
			t.Fatalf("seed %d: preferred leaders per node from %d to %d: %v", seed, lo, hi, leads)
		}
	}
}

func moving(s *State) int {
	n := 0
	for _, pl := range s.Placements {
		if !settled(pl) {
			n++
		}
	}
	return n
}

// repairsDone reports whether pl needs no repair: all its replicas are on
// active live nodes.
func repairsDone(s *State, pl *rpc.PartitionPlacement, dead func(uint64) bool) bool {
	for _, id := range pl.Replicas {
		if n, ok := s.Node(id); !ok || n.State != active || dead(id) {
			return false
		}
	}
	return true
}

func spread(ids []uint64, count map[uint64]int) (lo, hi int) {
	lo, hi = count[ids[0]], count[ids[0]]
	for _, id := range ids {
		lo, hi = min(lo, count[id]), max(hi, count[id])
	}
	return lo, hi
}

// TestPlacementGivesNothingToDownNodes: a node that is down but not dead
// yet keeps its replicas and is given no new one, neither to repair
// another's loss nor for balance (the new replica could not catch up, and
// once promoted would leave its partition short of live voters). Seeded:
// the subtest's name is the seed.
func TestPlacementGivesNothingToDownNodes(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			n := 3 + rng.IntN(6)
			s := &State{ID: bytes.Repeat([]byte{1}, ClusterIDLen), Replication: 3}
			downSet, deadSet := map[uint64]bool{}, map[uint64]bool{}
			for id := uint64(1); id <= uint64(n); id++ {
				s.insert(&rpc.ClusterNode{Id: id, State: active})
				switch rng.IntN(4) {
				case 0:
					downSet[id] = true
				case 1:
					downSet[id], deadSet[id] = true, true
				}
			}
			parts := 1 + rng.IntN(12)
			for p := uint32(1); p <= uint32(parts); p++ {
				reps := []uint64{1, 2, 3} // everything starts on the first three
				s.setPlacement(&rpc.PartitionPlacement{Partition: p, Replicas: reps, Version: 1, ObservedVoters: slices.Clone(reps)})
			}
			live := Liveness{Dead: func(id uint64) bool { return deadSet[id] }, Down: func(id uint64) bool { return downSet[id] }}
			for _, pl := range PlanPlacement(s, live, 2) {
				cur, _ := s.Placement(pl.Partition)
				for _, id := range pl.Replicas {
					if downSet[id] && !slices.Contains(cur.Replicas, id) {
						t.Fatalf("seed %d: partition %d given to node %d, which is down (target %v, was %v)", seed, pl.Partition, id, pl.Replicas, cur.Replicas)
					}
				}
				for _, id := range cur.Replicas {
					if downSet[id] && !deadSet[id] && !slices.Contains(pl.Replicas, id) {
						t.Fatalf("seed %d: partition %d taken from node %d, which is down but not dead (target %v, was %v)", seed, pl.Partition, id, pl.Replicas, cur.Replicas)
					}
				}
			}
		})
	}
}
