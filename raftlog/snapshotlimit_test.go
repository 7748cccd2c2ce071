package raftlog

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestGRPCSnapshotSendsAreBounded: a node added as a learner to many
// groups at once catches up by snapshot in every one, while no node ever
// streams more than SnapshotStreams snapshots at once or two to one peer,
// and the learner never receives more than SnapshotStreams at once: the
// others are refused and raft sends them again.
func TestGRPCSnapshotSendsAreBounded(t *testing.T) {
	const groups = 12
	var gids []GroupID
	for g := range GroupID(groups) {
		gids = append(gids, g+1)
	}
	var installsMu sync.Mutex
	installs := map[uint64]int{} // by node: Knobs.DuringSnapshotInstall calls
	c := newGRPCCluster(t, 3, gids, func(cfg *Config) {
		cfg.SnapshotEntries, cfg.SnapshotCatchUpEntries = 20, 5
		cfg.CheckpointInterval = 10 * time.Millisecond
		node := cfg.NodeID
		cfg.Knobs = &Knobs{DuringSnapshotInstall: func(GroupID) {
			installsMu.Lock()
			installs[node]++
			installsMu.Unlock()
		}}
	})
	groupsOf := func(gid GroupID) func() []*Group {
		return func() []*Group {
			var out []*Group
			for _, n := range c.nodes {
				out = append(out, n.Group(gid))
			}
			return out
		}
	}
	// Enough state that a snapshot takes a while to stream and install,
	// and a log compacted past its start.
	payload := strings.Repeat("x", 16<<10)
	for _, gid := range gids {
		for i := range 25 {
			confStep(t, fmt.Sprintf("propose to group %d", gid), groupsOf(gid), func(g *Group, m Membership) (Membership, error) {
				ctx, cancel := stepCtx()
				defer cancel()
				_, err := g.Propose(ctx, []byte(fmt.Sprintf("%d-%s", i, payload)))
				return m, err
			})
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r4 := ReplicaID(4, 0)
	c.ids = append(c.ids, 4)
	c.peers[4], c.dirs[4], c.replicas[4] = l.Addr().String(), t.TempDir(), r4
	for _, id := range []uint64{1, 2, 3} {
		if err := c.nodes[id].SetPeer(4, c.peers[4]); err != nil {
			t.Fatal(err)
		}
	}
	c.start(4, l)
	// One group after the other, without waiting: the snapshots of the
	// first are under way when the next ask for theirs.
	for _, gid := range gids {
		confStep(t, fmt.Sprintf("add learner 4 to group %d", gid), groupsOf(gid), func(g *Group, m Membership) (Membership, error) {
			ctx, cancel := stepCtx()
			defer cancel()
			return g.AddLearner(ctx, m, r4)
		})
	}
	testutil.WaitFor(t, 60*time.Second, "node 4 to catch up by snapshot in every group", func() bool {
		for _, gid := range gids {
			st := c.nodes[4].Group(gid).Status()
			lead := c.nodes[1].Group(gid).Status()
			if !slices.Contains(st.Membership.Learners, r4) || st.Applied < lead.Committed || c.nodes[4].wal.FirstIndex(uint32(gid)) <= 2 {
				return false
			}
		}
		return true
	})
	for _, id := range []uint64{1, 2, 3, 4} {
		out, outTo, in := c.nodes[id].snaps.peaks()
		t.Logf("node %d: at most %d snapshots sent at once (%d to one peer), %d received", id, out, outTo, in)
		if out > DefaultSnapshotStreams || outTo > 1 || in > DefaultSnapshotStreams {
			t.Errorf("node %d: %d snapshots sent at once (%d to one peer), %d received; bound %d, 1 to a peer", id, out, outTo, in, DefaultSnapshotStreams)
		}
	}
	installsMu.Lock()
	defer installsMu.Unlock()
	if installs[4] < groups {
		t.Errorf("node 4 installed %d snapshots (Knobs.DuringSnapshotInstall), want one per group at least (%d)", installs[4], groups)
	}
}
