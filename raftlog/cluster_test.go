package raftlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

func TestSingleVoterElectsItselfAndApplies(t *testing.T) {
	var persists, lastApplied atomic.Uint64
	c := newCluster(t, testSeed(t), 1, []GroupID{MetaGroup, 1}, func(cfg *Config) {
		cfg.Knobs = &Knobs{
			// No tick ever: a lone voter must campaign at once.
			ManualTicks:    true,
			BeforeLogWrite: func() { persists.Add(1) },
			AfterApply: func(g GroupID, index uint64) {
				if g == 1 {
					if prev := lastApplied.Swap(index); prev > index {
						t.Errorf("AfterApply went back from %d to %d", prev, index)
					}
				}
			},
		}
	})
	lead := c.leader(1, c.ids, 10*time.Second)
	if lead != 1 {
		t.Fatalf("leader = %d, want 1", lead)
	}
	for i := range 50 {
		if err := c.propose(1, 1, fmt.Sprintf("e%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.converged(1, 50, time.Second); len(got) != 50 || got[49] != "e49" {
		t.Fatalf("recorded %d entries, last %q", len(got), got[len(got)-1])
	}
	if err := c.nodes[1].Group(1).ReadIndex(context.Background()); err != nil {
		t.Fatalf("ReadIndex: %v", err)
	}
	if persists.Load() == 0 || lastApplied.Load() < 50 {
		t.Fatalf("knobs saw %d persists, applied index %d", persists.Load(), lastApplied.Load())
	}
}

func TestElectionAndReplication(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{MetaGroup, 1, 2}, nil)
	for _, gid := range c.groups {
		lead := c.leader(gid, c.ids, 5*time.Second)
		for i := range 20 {
			if err := c.propose(lead, gid, fmt.Sprintf("g%d-%d", gid, i)); err != nil {
				t.Fatalf("group %d: %v", gid, err)
			}
		}
		got := c.converged(gid, 20, 5*time.Second)
		if got[0] != fmt.Sprintf("g%d-0", gid) {
			t.Fatalf("group %d first entry %q", gid, got[0])
		}
	}
	// A follower refuses at once, naming the leader.
	lead := c.leader(1, c.ids, time.Second)
	follower := c.ids[0]
	if follower == lead {
		follower = c.ids[1]
	}
	_, err := c.nodes[follower].Group(1).Propose(context.Background(), []byte("x"))
	var nl *NotLeaderError
	if !errors.As(err, &nl) || nl.Leader != lead || nl.Group != 1 {
		t.Fatalf("follower Propose = %v, want NotLeaderError naming %d", err, lead)
	}
	if err := c.nodes[follower].Group(1).ReadIndex(context.Background()); !errors.As(err, &nl) {
		t.Fatalf("follower ReadIndex = %v, want NotLeaderError", err)
	}
	st := c.nodes[lead].Group(1).Status()
	if !st.IsLeader || st.Leader != lead || len(st.Voters) != 3 || len(st.Match) != 3 || st.Applied < 20 {
		t.Fatalf("leader status %+v", st)
	}
}

func TestReelectionAfterLeaderCutOff(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, nil)
	old := c.leader(1, c.ids, 5*time.Second)
	oldTerm := c.nodes[old].Group(1).leaderEvent().Term
	c.nw.Isolate(old, c.ids)
	rest := slices.DeleteFunc(slices.Clone(c.ids), func(id uint64) bool { return id == old })
	start := time.Now()
	lead := c.leader(1, rest, 5*time.Second)
	t.Logf("new leader %d after %v (20 ms ticks, ElectionTicks 10)", lead, time.Since(start))
	if ev := c.nodes[lead].Group(1).leaderEvent(); ev.Term <= oldTerm {
		t.Fatalf("new term %d not above old %d", ev.Term, oldTerm)
	}
	// CheckQuorum makes the cut-off leader step down.
	testutil.WaitFor(t, 5*time.Second, "old leader to step down", func() bool {
		return !c.nodes[old].Group(1).leaderEvent().IsSelf
	})
	if err := c.propose(lead, 1, "after"); err != nil {
		t.Fatal(err)
	}
	c.nw.Heal()
	c.converged(1, 1, 5*time.Second)
}

func TestMinorityCannotCommitAndHealedPartitionConverges(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, nil)
	old := c.leader(1, c.ids, 5*time.Second)
	if err := c.propose(old, 1, "before"); err != nil {
		t.Fatal(err)
	}
	c.nw.Isolate(old, c.ids)
	// The isolated leader still accepts proposals until CheckQuorum steps it
	// down, but it can never commit them.
	var orphan []uint64
	for i := range 5 {
		p, err := c.nodes[old].Group(1).Propose(context.Background(), []byte(fmt.Sprintf("orphan%d", i)))
		if err == nil {
			orphan = append(orphan, p.Index)
		}
	}
	rest := slices.DeleteFunc(slices.Clone(c.ids), func(id uint64) bool { return id == old })
	lead := c.leader(1, rest, 5*time.Second)
	for i := range 10 {
		if err := c.propose(lead, 1, fmt.Sprintf("majority%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entriesOf(t, c.nodes[old].Group(1)) {
		if e != "before" {
			t.Fatalf("minority side applied %q", e)
		}
	}
	c.nw.Heal()
	got := c.converged(1, 11, 10*time.Second)
	for _, e := range got {
		if len(e) >= 6 && e[:6] == "orphan" {
			t.Fatalf("uncommitted minority entry %q survived the heal", e)
		}
	}
	t.Logf("minority proposals accepted then discarded: %d", len(orphan))
}

// TestFaultyNetworkSameSequence proposes under drops and delays while the
// leader is repeatedly partitioned away, then checks that every replica
// applied the same sequence containing every acknowledged entry.
func TestFaultyNetworkSameSequence(t *testing.T) {
	seed := testSeed(t)
	c := newCluster(t, seed, 3, []GroupID{1, 2}, nil)
	c.nw.SetFaults(10, 5*time.Millisecond)
	acked := map[GroupID][]string{}
	deadline := time.Now().Add(3 * time.Second)
	round := 0
	for time.Now().Before(deadline) {
		round++
		for _, gid := range c.groups {
			lead := c.leader(gid, c.ids, 10*time.Second)
			for i := range 10 {
				data := fmt.Sprintf("g%d-r%d-%d", gid, round, i)
				if err := c.propose(lead, gid, data); err == nil {
					acked[gid] = append(acked[gid], data)
				}
			}
		}
		if round%3 == 0 {
			lead := c.leader(1, c.ids, 10*time.Second)
			c.nw.Isolate(lead, c.ids)
			rest := slices.DeleteFunc(slices.Clone(c.ids), func(id uint64) bool { return id == lead })
			c.leader(1, rest, 10*time.Second)
			c.nw.Heal()
			c.nw.SetFaults(10, 5*time.Millisecond)
		}
	}
	c.nw.Heal()
	for _, gid := range c.groups {
		got := c.converged(gid, len(acked[gid]), 10*time.Second)
		for _, a := range acked[gid] {
			if !slices.Contains(got, a) {
				t.Fatalf("group %d: acknowledged %q missing", gid, a)
			}
		}
		t.Logf("group %d: %d acknowledged, %d applied everywhere", gid, len(acked[gid]), len(got))
	}
}

func TestRestartKeepsCommittedEntries(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{MetaGroup, 1}, nil)
	var acked []string
	for i := range 30 {
		data := fmt.Sprintf("e%d", i)
		if err := c.proposeAnywhere(1, data); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, data)
	}
	lead := c.leader(1, c.ids, 5*time.Second)
	for _, id := range c.ids {
		c.stop(id)
	}
	for _, id := range c.ids {
		c.start(id)
	}
	for _, id := range c.ids {
		got := entriesOf(t, c.nodes[id].Group(1))
		// The leader applied every acked entry before the restart; followers
		// may lag, but never beyond what the log holds.
		if id == lead && !containsInOrder(got, acked) {
			t.Fatalf("leader %d recorded %v after restart, want all of %v", id, got, acked)
		}
	}
	lead = c.leader(1, c.ids, 5*time.Second)
	if err := c.propose(lead, 1, "after-restart"); err != nil {
		t.Fatal(err)
	}
	got := c.converged(1, 31, 5*time.Second)
	if !containsInOrder(got, append(acked, "after-restart")) {
		t.Fatalf("after restart: %v", got)
	}
}

func TestSnapshotCatchUpAfterCompaction(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, func(cfg *Config) {
		cfg.SnapshotEntries = 40
		cfg.SnapshotCatchUpEntries = 5
	})
	down := c.behindCompaction(t, func(i int) string { return fmt.Sprintf("e%d", i) })
	c.start(down)
	got := c.converged(1, 200, 10*time.Second)
	if got[0] != "e0" || got[len(got)-1] != "e199" {
		t.Fatalf("after catch-up: first %q last %q", got[0], got[len(got)-1])
	}
	if n := c.nodes[down]; testCounter(n.metrics.snapshotsInstalled) == 0 {
		t.Fatalf("follower %d caught up without a snapshot", down)
	}
	// The caught-up follower keeps replicating from the log afterwards, and
	// its state survives its own restart.
	if err := c.proposeAnywhere(1, "tail"); err != nil {
		t.Fatal(err)
	}
	got = c.converged(1, len(got)+1, 5*time.Second)
	c.stop(down)
	c.start(down)
	if after := entriesOf(t, c.nodes[down].Group(1)); len(after) < len(got) {
		t.Fatalf("follower has %d entries after restart, had %d", len(after), len(got))
	}
}

// TestApplyErrorStopsTheNode: a failing Apply stops the applier as a
// failed checkpoint does: the open transaction, which holds the other
// groups' applies since the last checkpoint too, is rolled back, the node
// reports the Apply's error and every group stops. Restarted (with the
// bug fixed: a fresh state machine), the node replays its log past the
// last checkpoint: nothing acknowledged is lost, and each state machine's
// in-memory count (like partition's outbox gauge) matches its state.
func TestApplyErrorStopsTheNode(t *testing.T) {
	c := newCluster(t, testSeed(t), 1, []GroupID{1, 2}, func(cfg *Config) {
		cfg.CheckpointInterval = time.Hour // one transaction until the failure
		cfg.CheckpointEntries = 1 << 30
	})
	c.leader(1, c.ids, 5*time.Second)
	c.leader(2, c.ids, 5*time.Second)
	failures := c.nodes[1].Failed()
	want := map[GroupID][]string{}
	for i := range 20 {
		for _, gid := range []GroupID{1, 2} {
			data := fmt.Sprintf("g%d-%d", gid, i)
			if err := c.propose(1, gid, data); err != nil {
				t.Fatal(err)
			}
			want[gid] = append(want[gid], data)
		}
	}
	c.sms[1][1].mu.Lock()
	c.sms[1][1].failOn = "poison"
	c.sms[1][1].mu.Unlock()
	if _, err := c.nodes[1].Group(1).Propose(context.Background(), []byte("poison")); err != nil {
		t.Fatal(err)
	}
	want[1] = append(want[1], "poison")
	select {
	case err := <-failures:
		if !errors.Is(err, errToldToFail) {
			t.Fatalf("the node failed with %v, want the Apply's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not report the failed Apply")
	}
	for _, gid := range []GroupID{1, 2} {
		testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("group %d to stop", gid), func() bool {
			_, err := c.nodes[1].Group(gid).Propose(context.Background(), []byte("x"))
			return errors.Is(err, ErrStopped)
		})
	}

	_ = c.nodes[1].Close() // reports the group failure again
	delete(c.nodes, 1)
	c.start(1)
	c.leader(1, c.ids, 5*time.Second)
	c.leader(2, c.ids, 5*time.Second)
	for _, gid := range []GroupID{1, 2} {
		if got := entriesOf(t, c.nodes[1].Group(gid)); !slices.Equal(got, want[gid]) {
			t.Fatalf("group %d holds %v after the restart, want %v", gid, got, want[gid])
		}
		sm := c.sms[1][gid]
		testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("group %d's count revealed", gid), func() bool {
			sm.mu.Lock()
			defer sm.mu.Unlock()
			return sm.count == uint64(len(want[gid]))
		})
	}
}

// containsInOrder says whether want is a subsequence of got (a retried
// proposal may have landed twice).
func containsInOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestFailedCommitStopsAllWrites: once a state checkpoint fails (a full
// disk), the node writes nothing more, whatever is queued behind it: its
// state machines ran ahead of its state file, so it must not go on
// acknowledging. The node reports the failure; restarted, it catches up
// from what it did write.
func TestFailedCommitStopsAllWrites(t *testing.T) {
	errNoSpace := errors.New("no space left on device")
	var target atomic.Uint64 // the node whose disk fails
	var failed, reported atomic.Bool
	var commitsAfter atomic.Int64
	c := newCluster(t, testSeed(t), 3, []GroupID{MetaGroup, 1, 2}, func(cfg *Config) {
		id := cfg.NodeID
		cfg.Knobs = &Knobs{
			BeforeLogWrite: func() {
				if id == target.Load() && reported.Load() {
					commitsAfter.Add(1)
				}
			},
			FailCommit: func() error {
				if id == target.Load() && failed.CompareAndSwap(false, true) {
					return errNoSpace
				}
				return nil
			},
		}
	})
	lead := c.leader(1, c.ids, 5*time.Second)
	lead2 := c.leader(2, c.ids, 5*time.Second)
	victim := c.ids[0]
	for victim == lead || victim == lead2 {
		victim++
	}
	failures := c.nodes[victim].Failed()
	target.Store(victim)
	// Its groups announce that they lead nothing any more, so that what
	// waits on them fails at once.
	var stoppedLeading sync.Map
	defer c.nodes[victim].Watch(func(ev LeaderEvent) {
		if ev.Leader == 0 && !ev.IsSelf && failed.Load() {
			stoppedLeading.Store(ev.Group, true)
		}
	})()
	// Traffic in both groups keeps writes queued on the victim's writer.
	for i := range 40 {
		for gid, l := range map[GroupID]uint64{1: lead, 2: lead2} {
			if err := c.propose(l, gid, fmt.Sprintf("g%d-%d", gid, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case err := <-failures:
		reported.Store(true)
		if !errors.Is(err, errNoSpace) {
			t.Fatalf("node %d failed with %v", victim, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("node %d did not report its failed commit", victim)
	}
	if !failed.Load() {
		t.Fatal("no commit was failed")
	}
	// Traffic goes on, and the failed node's peers keep sending to it.
	for i := range 10 {
		if err := c.propose(lead, 1, fmt.Sprintf("more-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := commitsAfter.Load(); n != 0 {
		t.Fatalf("node %d wrote %d more log batches after it reported its failed checkpoint", victim, n)
	}
	if n := testCounter(c.nodes[victim].metrics.writeFailures); n != 1 {
		t.Fatalf("raftgate_storage_write_failures_total = %v, want 1", n)
	}
	testutil.WaitFor(t, 5*time.Second, "the failed node's groups to announce they lead nothing", func() bool {
		_, ok1 := stoppedLeading.Load(GroupID(1))
		_, ok2 := stoppedLeading.Load(GroupID(2))
		return ok1 && ok2
	})

	_ = c.nodes[victim].Close() // reports the group failure again
	delete(c.nodes, victim)
	c.start(victim)
	for gid := range GroupID(2) {
		c.converged(gid+1, 40, 10*time.Second)
		c.sameDigests(gid+1, 10*time.Second)
	}
}

// TestLeaderStatusTellsSilentVoter: the leader's Status reports every
// voter it hears from as active, also in the moment after CheckQuorum
// clears raft's RecentActive flags, and a cut-off voter as not active, so
// that operators see a dead replica as down rather than caught up.
func TestLeaderStatusTellsSilentVoter(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, nil)
	lead := c.leader(1, c.ids, 5*time.Second)
	allActive := func() bool {
		st := c.nodes[lead].Group(1).Status()
		return st.IsLeader && len(st.Active) == 3 && st.Active[1] && st.Active[2] && st.Active[3]
	}
	testutil.WaitFor(t, 5*time.Second, "every voter active", allActive)
	// Over several election timeouts (10 ticks of 20 ms), never a gap.
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		if !allActive() {
			t.Fatalf("a live voter reported inactive: %+v", c.nodes[lead].Group(1).Status())
		}
	}
	cut := c.ids[0]
	if cut == lead {
		cut = c.ids[1]
	}
	c.nw.Isolate(cut, c.ids)
	testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("voter %d reported inactive, the others active", cut), func() bool {
		st := c.nodes[lead].Group(1).Status()
		for _, id := range c.ids {
			if st.Active[id] != (id != cut) {
				return false
			}
		}
		return true
	})
}

// behindCompaction stops a follower of group 1, proposes 200 entries
// (entry(i) each) and waits until the leader compacted its log past
// them, so that the follower, started again, can only catch up by
// snapshot. It returns the stopped follower.
func (c *cluster) behindCompaction(t *testing.T, entry func(i int) string) uint64 {
	t.Helper()
	lead := c.leader(1, c.ids, 5*time.Second)
	down := c.ids[0]
	if down == lead {
		down = c.ids[1]
	}
	c.stop(down)
	for i := range 200 {
		if err := c.proposeAnywhere(1, entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	lead = c.leader(1, c.running(), 5*time.Second)
	testutil.WaitFor(t, 5*time.Second, "leader log compaction", func() bool {
		var first uint64
		_ = c.nodes[lead].Group(1).call(context.Background(), func() { first, _ = c.nodes[lead].Group(1).store.FirstIndex() })
		return first > 100
	})
	return down
}
