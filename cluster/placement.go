package cluster

import (
	"slices"

	"github.com/raftgate/raftgate/rpc"
)

// Placement puts each partition on Replication of the active nodes (all
// of them while there are fewer). The metadata leader plans it
// (PlanPlacement) and records the targets in the record; the leader of
// each partition then moves the partition's configuration toward its
// target one step at a time (PlanGroup): a new replica is added as a
// learner, promoted once caught up, and only then is a replica that is no
// longer wanted removed. A move is thus never left half done: whoever leads
// after a crash continues from the configuration it finds.

// DefaultMaxMoves bounds the partitions moving at once for balance
// (repairs are not bounded: a replica on a dead or draining node is
// replaced at once).
const DefaultMaxMoves = 2

// Liveness is what the planner knows of the nodes' health.
type Liveness struct {
	// Dead reports a node gone for longer than the operator's patience
	// (--dead-node-timeout): its replicas are replaced.
	Dead func(uint64) bool
	// Down reports a node not heard from now: it keeps its replicas but is
	// given no new one, so a move never waits on a node that cannot catch
	// up (nor, once promoted, leaves its partition short of a live
	// quorum).
	Down func(uint64) bool
}

// PlanPlacement returns the partitions whose target placement should
// change, each with the version it expects (SetPlacement's
// compare-and-swap).
//
// In order: repair (replicas on nodes that are not active, or dead, are
// replaced; the replication factor is met), zone spread (at most ⌈R/Z⌉
// replicas of a partition per zone, where Z counts the zones of the
// eligible nodes), balance (replicas per node within one of even, at most
// maxMoves partitions moving at once, none while Paused), and preferred
// leaders (one of the replicas, spread within one of even). The same input
// gives the same plan.
func PlanPlacement(s *State, live Liveness, maxMoves int) []*rpc.PartitionPlacement {
	if s.ID == nil {
		return nil
	}
	var eligible []uint64
	zoneOf := map[uint64]string{}
	zones := map[string]bool{}
	for _, n := range s.Nodes {
		if n.State == rpc.NodeState_NODE_STATE_ACTIVE && !live.Dead(n.Id) {
			eligible = append(eligible, n.Id)
			zoneOf[n.Id] = n.Zone
			zones[n.Zone] = true
		}
	}
	if len(eligible) == 0 {
		return nil
	}
	r := min(int(max(s.Replication, 1)), len(eligible))
	zoneCap := (r + len(zones) - 1) / len(zones)

	// The plan works on copies; changed marks what it touched.
	plans := map[uint32]*rpc.PartitionPlacement{}
	var order []uint32
	for _, pl := range s.Placements {
		if pl.Partition == 0 {
			continue
		}
		cp := &rpc.PartitionPlacement{Partition: pl.Partition, Replicas: slices.Clone(pl.Replicas), PreferredLeader: pl.PreferredLeader, Version: pl.Version}
		plans[pl.Partition] = cp
		order = append(order, pl.Partition)
	}
	changed := map[uint32]bool{}
	load := map[uint64]int{}
	for _, id := range eligible {
		load[id] = 0
	}
	for _, p := range order {
		for _, id := range plans[p].Replicas {
			load[id]++
		}
	}
	isEligible := func(id uint64) bool { _, ok := zoneOf[id]; return ok }
	inZone := func(reps []uint64, zone string) int {
		n := 0
		for _, id := range reps {
			if isEligible(id) && zoneOf[id] == zone {
				n++
			}
		}
		return n
	}
	// pick returns the least loaded eligible node that is up and not in
	// reps, preferring one whose zone has room; 0 when none.
	pick := func(reps []uint64) uint64 {
		var best uint64
		bestRoom := false
		for _, id := range eligible {
			if slices.Contains(reps, id) || live.Down(id) {
				continue
			}
			room := inZone(reps, zoneOf[id]) < zoneCap
			if best == 0 || room && !bestRoom || room == bestRoom && load[id] < load[best] {
				best, bestRoom = id, room
			}
		}
		return best
	}

	// Repair and zone spread.
	for _, p := range order {
		pl := plans[p]
		reps := slices.DeleteFunc(slices.Clone(pl.Replicas), func(id uint64) bool { return !isEligible(id) })
		for len(reps) > r { // replication lowered: the most loaded goes
			worst := reps[0]
			for _, id := range reps {
				if load[id] > load[worst] || load[id] == load[worst] && id > worst {
					worst = id
				}
			}
			reps = slices.DeleteFunc(reps, func(id uint64) bool { return id == worst })
			load[worst]--
		}
		for len(reps) < r {
			id := pick(reps)
			if id == 0 {
				break
			}
			reps = append(reps, id)
			load[id]++
		}
		for _, id := range reps { // a zone over its share gives one up
			if inZone(reps, zoneOf[id]) <= zoneCap {
				continue
			}
			to := pick(reps)
			if to == 0 || inZone(reps, zoneOf[to]) >= zoneCap {
				break
			}
			reps[slices.Index(reps, id)] = to
			load[id]--
			load[to]++
			break // one per plan: the next round sees the result
		}
		if !sameSet(reps, pl.Replicas) {
			pl.Replicas, changed[p] = reps, true
		}
	}

	// Balance, a bounded number of moves at a time.
	moving := 0
	for _, pl := range s.Placements {
		if pl.Partition != 0 && (changed[pl.Partition] || !settled(pl)) {
			moving++
		}
	}
	for !s.Paused && moving < maxMoves {
		var hi, lo uint64 // a node that is down neither gives nor takes
		for _, id := range eligible {
			if live.Down(id) {
				continue
			}
			if hi == 0 || load[id] > load[hi] {
				hi = id
			}
			if lo == 0 || load[id] < load[lo] {
				lo = id
			}
		}
		if hi == 0 || load[hi]-load[lo] <= 1 {
			break
		}
		moved := false
		for _, p := range order {
			pl := plans[p]
			if changed[p] || !slices.Contains(pl.Replicas, hi) || slices.Contains(pl.Replicas, lo) {
				continue
			}
			if cur, _ := s.Placement(p); !settled(cur) {
				continue
			}
			if zoneOf[lo] != zoneOf[hi] && inZone(pl.Replicas, zoneOf[lo]) >= zoneCap {
				continue
			}
			pl.Replicas[slices.Index(pl.Replicas, hi)] = lo
			load[hi]--
			load[lo]++
			changed[p], moved = true, true
			moving++
			break
		}
		if !moved {
			break
		}
	}

	// Preferred leaders: one of the replicas, spread.
	leads := map[uint64]int{}
	for _, p := range order {
		pl := plans[p]
		if !slices.Contains(pl.Replicas, pl.PreferredLeader) || !isEligible(pl.PreferredLeader) {
			pl.PreferredLeader = 0
			continue
		}
		leads[pl.PreferredLeader]++
	}
	for _, p := range order {
		pl := plans[p]
		if pl.PreferredLeader != 0 || len(pl.Replicas) == 0 {
			continue
		}
		pl.PreferredLeader = leastOf(p, pl.Replicas, leads)
		leads[pl.PreferredLeader]++
		changed[p] = true
	}
	// Then the node with the fewest takes one from a replica partner
	// with at least two more, until none can.
	for range len(order) * len(eligible) {
		moved := false
		for _, lo := range eligible {
			for _, p := range order {
				pl := plans[p]
				if from := pl.PreferredLeader; from != lo && slices.Contains(pl.Replicas, lo) && leads[from]-leads[lo] > 1 {
					pl.PreferredLeader = lo
					leads[from]--
					leads[lo]++
					changed[p], moved = true, true
				}
			}
		}
		if !moved {
			break
		}
	}

	var out []*rpc.PartitionPlacement
	for _, p := range order {
		if changed[p] {
			cur, _ := s.Placement(p)
			if pl := plans[p]; !sameSet(pl.Replicas, cur.Replicas) || pl.PreferredLeader != cur.PreferredLeader {
				out = append(out, pl)
			}
		}
	}
	return out
}

// settled reports whether pl's recorded configuration is its target: all
// voters, no learner, not joint.
func settled(pl *rpc.PartitionPlacement) bool {
	return !pl.ObservedJoint && len(pl.ObservedLearners) == 0 && sameSet(pl.ObservedVoters, pl.Replicas)
}

// leastOf returns the replica of partition p with the fewest count. Ties
// go to the first in the sorted replicas from position p mod their number,
// raftlog.PreferredLeader's rule, so that a balanced cluster's preferred
// leaders are the ones raftlog would pick without placement.
func leastOf(p uint32, ids []uint64, count map[uint64]int) uint64 {
	sorted := slices.Sorted(slices.Values(ids))
	best := uint64(0)
	for k := range sorted {
		id := sorted[(int(p)+k)%len(sorted)]
		if best == 0 || count[id] < count[best] {
			best = id
		}
	}
	return best
}

func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
