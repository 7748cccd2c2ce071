package raftlog

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

func TestPreferredLeaderSpreadsGroups(t *testing.T) {
	if got := PreferredLeader(1, nil); got != 0 {
		t.Fatalf("no voters: got %d, want 0", got)
	}
	voters := []uint64{30, 10, 20} // unsorted on purpose: every node must agree
	want := []uint64{10, 20, 30, 10, 20, 30, 10}
	for g, w := range want {
		if got := PreferredLeader(GroupID(g), voters); got != w {
			t.Errorf("group %d: preferred %d, want %d", g, got, w)
		}
	}
	if !slices.Equal(voters, []uint64{30, 10, 20}) {
		t.Errorf("PreferredLeader reordered its argument: %v", voters)
	}
	// Partitions 1..4 of three nodes: 2, 1, 1 per node.
	per := map[uint64]int{}
	for p := GroupID(1); p <= 4; p++ {
		per[PreferredLeader(p, []uint64{1, 2, 3})]++
	}
	if got := slices.Sorted(maps.Values(per)); !slices.Equal(got, []int{1, 1, 2}) {
		t.Errorf("4 partitions over 3 nodes: leaders per node %v, want 2/1/1", per)
	}
}

// TestLeaderBalanceMovesGroupsToPreferredVoters: on manual ticks, leaders
// hand their groups to the preferred voters; a group whose preferred voter
// is cut off stays where it is (no hand-off to an unreachable node) and
// goes back once it heals; entries survive every move.
func TestLeaderBalanceMovesGroupsToPreferredVoters(t *testing.T) {
	const every = 20
	groups := []GroupID{0, 1, 2, 3}
	c := newCluster(t, testSeed(t), 3, groups, func(cfg *Config) {
		cfg.Knobs = &Knobs{ManualTicks: true}
		cfg.LeaderBalanceTicks = every
	})
	// leaders returns each group's leader as the running nodes agree on
	// it (0 while they do not).
	leaders := func() map[GroupID]uint64 {
		out := map[GroupID]uint64{}
		for _, gid := range groups {
			var lead uint64
			for i, id := range c.running() {
				ev := c.nodes[id].Group(gid).leaderEvent()
				if i > 0 && ev.Leader != lead {
					lead = 0
					break
				}
				lead = ev.Leader
			}
			out[gid] = lead
		}
		return out
	}
	preferred := func(gid GroupID) uint64 { return PreferredLeader(gid, c.ids) }
	// tickUntil ticks until cond holds for the current leaders, at most limit
	// ticks, and returns how many it took.
	tickUntil := func(what string, limit int, cond func(map[GroupID]uint64) bool) int {
		t.Helper()
		for n := 0; ; n++ {
			ls := leaders()
			if cond(ls) {
				return n
			}
			if n == limit {
				t.Fatalf("after %d ticks, %s: leaders %v", limit, what, ls)
			}
			c.tickSettled()
		}
	}
	balanced := func(ls map[GroupID]uint64) bool {
		for _, gid := range groups {
			if ls[gid] != preferred(gid) {
				return false
			}
		}
		return true
	}
	n := tickUntil("every group led by its preferred voter", 20*every, balanced)
	t.Logf("balanced after %d ticks", n)
	for _, gid := range groups {
		if err := c.proposeAnywhere(gid, fmt.Sprintf("g%d-balanced", gid)); err != nil {
			t.Fatal(err)
		}
	}

	// Cut off node 2, group 1's preferred voter: group 1 elects another
	// leader, which must not try to hand it back while node 2 is away.
	const away = 2
	c.nw.Isolate(away, c.ids)
	rest := slices.DeleteFunc(slices.Clone(c.ids), func(id uint64) bool { return id == away })
	ledByRest := func(ls map[GroupID]uint64) bool {
		l := c.nodes[rest[0]].Group(1).leaderEvent().Leader
		return l != 0 && l != away && c.nodes[rest[1]].Group(1).leaderEvent().Leader == l
	}
	tickUntil("group 1 led by a node that is not cut off", 10*every, ledByRest)
	handoffs := func() (sum float64) {
		for _, id := range c.running() {
			sum += testCounter(c.nodes[id].metrics.leaderHandoffs)
		}
		return sum
	}
	before := handoffs()
	for range 3 * every {
		c.tickSettled()
	}
	if got := handoffs(); got != before {
		t.Fatalf("%v hand-offs while the preferred voter was unreachable", got-before)
	}
	if !ledByRest(nil) {
		t.Fatal("group 1 lost its leader while node 2 was cut off")
	}
	if err := c.propose(c.leader(1, rest, 5*time.Second), 1, "g1-while-away"); err != nil {
		t.Fatal(err)
	}

	c.nw.Heal()
	tickUntil("every group back with its preferred voter after the heal", 20*every, balanced)
	for _, gid := range groups {
		got := c.converged(gid, 1, 10*time.Second)
		if gid == 1 && !slices.Contains(got, "g1-while-away") {
			t.Errorf("group 1 lost an entry across the hand-offs: %v", got)
		}
	}
}

// TestSetPreferredLeaderOverrides: a node named by SetPreferredLeader
// (placement's preferred leader) gets the group, on manual ticks, where
// PreferredLeader would have chosen another; a node that is not a voter is
// ignored; 0 goes back to PreferredLeader's choice.
func TestSetPreferredLeaderOverrides(t *testing.T) {
	const every = 20
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, func(cfg *Config) {
		cfg.Knobs = &Knobs{ManualTicks: true}
		cfg.LeaderBalanceTicks = every
	})
	ledBy := func(want uint64) bool {
		for _, id := range c.running() {
			if c.nodes[id].Group(1).leaderEvent().Leader != want {
				return false
			}
		}
		return true
	}
	tickUntil := func(what string, want uint64) {
		t.Helper()
		for n := 0; !ledBy(want); n++ {
			if n == 30*every {
				t.Fatalf("after %d ticks, %s: leader %d", n, what, c.nodes[c.ids[0]].Group(1).leaderEvent().Leader)
			}
			c.tickSettled()
		}
	}
	def := PreferredLeader(1, c.ids)
	tickUntil("led by PreferredLeader's choice", def)
	other := c.ids[0]
	if other == def {
		other = c.ids[1]
	}
	setAll := func(node uint64) {
		for _, id := range c.ids {
			c.nodes[id].Group(1).SetPreferredLeader(node)
		}
	}
	setAll(99) // not a voter: no change
	for range 3 * every {
		c.tickSettled()
	}
	if !ledBy(def) {
		t.Fatalf("a preferred node that is not a voter moved the leadership")
	}
	setAll(other)
	tickUntil("led by the node SetPreferredLeader named", other)
	if err := c.proposeAnywhere(1, "after-override"); err != nil {
		t.Fatal(err)
	}
	setAll(0)
	tickUntil("led by PreferredLeader's choice again", def)
}
