package cluster

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

func record(states map[uint64]rpc.NodeState, replaces map[uint64]uint64) *State {
	s := &State{ID: bytes.Repeat([]byte{1}, ClusterIDLen)}
	for id := uint64(1); id <= 9; id++ {
		if st, ok := states[id]; ok {
			s.insert(&rpc.ClusterNode{Id: id, State: st, Replaces: replaces[id]})
		}
	}
	return s
}

func conf(voters, learners []uint64) raftlog.Membership {
	r := func(ns []uint64) []uint64 {
		var out []uint64
		for _, n := range ns {
			out = append(out, raftlog.ReplicaID(n, 0))
		}
		return out
	}
	return raftlog.Membership{Voters: r(voters), Learners: r(learners)}
}

func TestPlanGroup(t *testing.T) {
	three := map[uint64]rpc.NodeState{1: active, 2: active, 3: active}
	withJoiner := map[uint64]rpc.NodeState{1: active, 2: active, 3: active, 4: joining}
	draining3 := map[uint64]rpc.NodeState{1: active, 2: active, 3: draining}
	for _, tc := range []struct {
		name string
		s    *State
		m    raftlog.Membership
		want GroupStep
	}{
		{"settled", record(three, nil), conf([]uint64{1, 2, 3}, nil), GroupStep{}},
		{"not initialised", &State{}, conf([]uint64{1}, nil), GroupStep{}},
		{"a joiner gets a learner", record(withJoiner, nil), conf([]uint64{1, 2, 3}, nil), GroupStep{StepAddLearner, raftlog.ReplicaID(4, 0)}},
		{"then is promoted", record(withJoiner, nil), conf([]uint64{1, 2, 3}, []uint64{4}), GroupStep{StepPromote, raftlog.ReplicaID(4, 0)}},
		{"a joint configuration is left first", record(three, nil), raftlog.Membership{Voters: conf([]uint64{1, 2, 3}, nil).Voters, Outgoing: conf([]uint64{1, 2}, nil).Voters}, GroupStep{Kind: StepLeaveJoint}},
		{"a draining voter is removed", record(draining3, nil), conf([]uint64{1, 2, 3}, nil), GroupStep{StepRemove, raftlog.ReplicaID(3, 0)}},
		{"a learner of a removed node goes before anything else", record(map[uint64]rpc.NodeState{1: active, 2: active, 3: removed, 4: joining}, nil), conf([]uint64{1, 2}, []uint64{3}), GroupStep{StepRemove, raftlog.ReplicaID(3, 0)}},
		{"the last voter stays", record(map[uint64]rpc.NodeState{1: draining}, nil), conf([]uint64{1}, nil), GroupStep{}},
		{"a replaced node keeps its voter until it drains", record(map[uint64]rpc.NodeState{1: active, 2: active, 3: active, 4: active}, map[uint64]uint64{4: 3}), conf([]uint64{1, 2, 3, 4}, nil), GroupStep{}},
	} {
		if got := PlanGroup(tc.s, 1, tc.m); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// observe records conf as group's observed configuration in s.
func observe(s *State, group uint32, conf raftlog.Membership) {
	pl := &rpc.PartitionPlacement{Partition: group}
	if cur, ok := s.Placement(group); ok {
		pl = proto.Clone(cur).(*rpc.PartitionPlacement)
	}
	pl.ObservedVoters, pl.ObservedLearners, pl.ObservedJoint = nodesOf(conf.Voters), nodesOf(conf.Learners), conf.Joint()
	pl.ObservedIndex++
	s.setPlacement(pl)
}

func nodesOf(replicas []uint64) []uint64 {
	var out []uint64
	for _, r := range replicas {
		out = append(out, raftlog.NodeOf(r))
	}
	return out
}

// TestPlanMetaGroupCap: the metadata group grows to five voters and keeps
// further nodes as learners, promoting one when a voter leaves; a joiner
// that is a learner of a capped metadata group becomes active.
func TestPlanMetaGroupCap(t *testing.T) {
	s := record(map[uint64]rpc.NodeState{1: active, 2: active, 3: active, 4: active, 5: active, 6: joining}, nil)
	capped := conf([]uint64{1, 2, 3, 4, 5}, []uint64{6})
	if got := PlanGroup(s, 0, capped); got != (GroupStep{}) {
		t.Fatalf("a sixth node promoted: %+v", got)
	}
	if got := PlanGroup(s, 1, capped); got.Kind != StepPromote {
		t.Fatalf("a partition is not capped: %+v", got)
	}
	observe(s, 0, capped)
	if got := PlanNodes(s); !slices.Equal(got, []NodeStep{{6, joining, active}}) {
		t.Fatalf("the learner of a capped metadata group: %+v", got)
	}
	s = record(map[uint64]rpc.NodeState{1: active, 2: active, 3: active, 4: active, 5: removed, 6: active}, nil)
	if got := PlanGroup(s, 0, conf([]uint64{1, 2, 3, 4}, []uint64{6})); got != (GroupStep{StepPromote, raftlog.ReplicaID(6, 0)}) {
		t.Fatalf("a learner not promoted when a voter left: %+v", got)
	}
}

func TestPlanNodes(t *testing.T) {
	s := record(map[uint64]rpc.NodeState{1: active, 2: active, 3: active, 4: joining}, nil)
	s.setPlacement(&rpc.PartitionPlacement{Partition: 1}) // placed on every node, not observed yet
	observe(s, 0, conf([]uint64{1, 2, 3, 4}, nil))
	if got := PlanNodes(s); len(got) != 0 {
		t.Fatalf("a partition without a recorded configuration, yet: %+v", got)
	}
	observe(s, 1, conf([]uint64{1, 2, 3}, []uint64{4}))
	if got := PlanNodes(s); len(got) != 0 {
		t.Fatalf("a joiner still a learner somewhere made active: %+v", got)
	}
	observe(s, 1, conf([]uint64{1, 2, 3, 4}, nil))
	if got := PlanNodes(s); !slices.Equal(got, []NodeStep{{4, joining, active}}) {
		t.Fatalf("a joiner voter everywhere: %+v", got)
	}
	s = record(map[uint64]rpc.NodeState{1: active, 2: active, 3: active, 4: active}, map[uint64]uint64{4: 3})
	observe(s, 0, conf([]uint64{1, 2, 3, 4}, nil))
	if got := PlanNodes(s); !slices.Equal(got, []NodeStep{{3, active, draining}}) {
		t.Fatalf("the replaced node: %+v", got)
	}
	s = record(map[uint64]rpc.NodeState{1: active, 2: active, 3: draining}, nil)
	observe(s, 0, conf([]uint64{1, 2}, nil))
	observe(s, 1, conf([]uint64{1, 2}, []uint64{3}))
	if got := PlanNodes(s); len(got) != 0 {
		t.Fatalf("a draining node with a learner left removed: %+v", got)
	}
	observe(s, 1, conf([]uint64{1, 2}, nil))
	if got := PlanNodes(s); !slices.Equal(got, []NodeStep{{3, draining, removed}}) {
		t.Fatalf("a drained node: %+v", got)
	}
}

// TestPlanConverges drives random clusters (seeded; -run with the seed in
// the failure replays it) through the planner with an idealised executor
// (every step succeeds at once, every learner is caught up): whatever the
// start, the groups end with a voter on every joining or active node and
// nothing else, every node ends active or removed, and never does a group
// lose its last voter.
func TestPlanConverges(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { planConverges(t, seed) })
	}
}

func planConverges(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	states := map[uint64]rpc.NodeState{}
	replaces := map[uint64]uint64{}
	n := 1 + rng.IntN(5)
	for id := uint64(1); id <= uint64(n); id++ {
		states[id] = active
	}
	var voters []uint64
	for id := range uint64(n) {
		voters = append(voters, id+1)
	}
	// Then joins, replacements and drains on top.
	for id := uint64(n + 1); id <= uint64(n+rng.IntN(3)); id++ {
		states[id] = joining
		if rng.IntN(2) == 0 {
			replaces[id] = 1 + uint64(rng.IntN(n))
		}
	}
	for id := uint64(1); id <= uint64(n); id++ {
		if rng.IntN(4) == 0 && len(states) > 1 {
			states[id] = draining
		}
	}
	s := record(states, replaces)
	groups := make([]raftlog.Membership, 1+rng.IntN(3))
	for i := range groups {
		groups[i] = conf(voters, nil)
	}
	for round := 0; round < 200; round++ {
		moved := false
		for i, m := range groups {
			st := PlanGroup(s, uint32(i), m)
			if st.Kind != StepNone {
				groups[i], moved = apply(m, st), true
			}
			if len(groups[i].Voters) == 0 {
				t.Fatalf("seed %d: group %d lost its last voter", seed, i)
			}
			observe(s, uint32(i), groups[i])
		}
		for _, ns := range PlanNodes(s) {
			cur, _ := s.Node(ns.ID)
			if cur.State != ns.From {
				t.Fatalf("seed %d: planned %+v on %s", seed, ns, StateName(cur.State))
			}
			nn := proto.Clone(cur).(*rpc.ClusterNode)
			nn.State = ns.To
			cp := *s
			cp.Nodes = slices.Clone(s.Nodes)
			cp.insert(nn)
			s, moved = &cp, true
		}
		if !moved {
			break
		}
	}
	for _, node := range s.Nodes {
		if node.State != active && node.State != removed && !(node.State == draining && len(s.Members()) == 1) {
			t.Fatalf("seed %d: node %d ends %s", seed, node.Id, StateName(node.State))
		}
	}
	for i, m := range groups {
		if m.Joint() || len(m.Learners) > 0 && !(i == 0 && len(m.Voters) == MaxMetaVoters) {
			t.Fatalf("seed %d: group %d ends %+v", seed, i, m)
		}
		for _, r := range m.Voters {
			if !wanted(s, raftlog.NodeOf(r)) && len(m.Voters) > 1 {
				t.Fatalf("seed %d: group %d keeps node %d", seed, i, raftlog.NodeOf(r))
			}
		}
	}
}

// apply is an idealised executor of one step.
func apply(m raftlog.Membership, st GroupStep) raftlog.Membership {
	del := func(ids []uint64, r uint64) []uint64 {
		return slices.DeleteFunc(slices.Clone(ids), func(x uint64) bool { return x == r })
	}
	switch st.Kind {
	case StepAddLearner:
		m.Learners = append(slices.Clone(m.Learners), st.Replica)
	case StepPromote:
		m.Learners = del(m.Learners, st.Replica)
		m.Voters = append(slices.Clone(m.Voters), st.Replica)
		slices.Sort(m.Voters)
	case StepLeaveJoint:
		m.Outgoing = nil
	case StepRemove:
		m.Learners, m.Voters = del(m.Learners, st.Replica), del(m.Voters, st.Replica)
	}
	return m
}
