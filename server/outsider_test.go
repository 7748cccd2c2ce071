package server

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestNodeOutsideInitialClusterIsNotAMember: a node started with an id
// outside the cluster's --initial-cluster joins its gossip and sends it
// raft messages. No node of the cluster lists it in /cluster, and each
// logs the refusal of its messages once, with the reason, however often
// they come.
func TestNodeOutsideInitialClusterIsNotAMember(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four nodes")
	}
	logs := map[uint64]*testutil.LockedBuffer{}
	nodes := startTestClusterLogging(t, 3, func(id uint64) zerolog.Logger {
		logs[id] = &testutil.LockedBuffer{}
		return zerolog.New(logs[id]).Level(zerolog.DebugLevel)
	})

	out := DefaultConfig()
	out.NodeID = 4
	out.DataDir = t.TempDir()
	out.IngressAddr, out.AdminAddr, out.NodeAddr, out.GossipAddr = freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	out.InitialCluster = maps.Clone(nodes[0].cfg.InitialCluster)
	out.InitialCluster[4] = out.NodeAddr
	for _, nd := range nodes {
		out.Join = append(out.Join, nd.cfg.GossipAddr)
	}
	out.ShutdownGrace = 2 * time.Second
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	outsider, err := startNode(out, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outsider.Close() })

	const refused = "raft message refused"
	fromOutsider := func(level string) func(string) bool {
		return func(line string) bool {
			return strings.Contains(line, refused) && strings.Contains(line, `"from":4`) && strings.Contains(line, `"level":"`+level+`"`)
		}
	}
	count := func(s string, match func(string) bool) int {
		n := 0
		for _, line := range strings.Split(s, "\n") {
			if match(line) {
				n++
			}
		}
		return n
	}
	// Repeated refusals go to debug: wait until each node refused the
	// outsider a few times, and gossip had the time to list it.
	testutil.WaitFor(t, 20*time.Second, "every node to refuse the outsider's raft messages three times", func() bool {
		for _, nd := range nodes {
			if count(logs[nd.cfg.NodeID].String(), fromOutsider("debug")) < 3 {
				return false
			}
		}
		return true
	})
	testutil.WaitFor(t, 10*time.Second, "the outsider to see the cluster's nodes in gossip", func() bool {
		return len(outsider.members.Members()) == 4
	})
	for _, nd := range nodes {
		var ids []string
		for _, m := range (clusterView{n: nd}).Nodes() {
			ids = append(ids, fmt.Sprint(m.ID))
		}
		if got := strings.Join(ids, ","); got != "1,2,3" {
			t.Errorf("node %d's /cluster lists nodes %s, want 1,2,3", nd.cfg.NodeID, got)
		}
		l := logs[nd.cfg.NodeID].String()
		if n := count(l, fromOutsider("warn")); n != 1 || !strings.Contains(l, `"reason":"the sender is not one of this node's peers`) {
			t.Errorf("node %d logged the refusal at warn %d times (want once, with the reason)", nd.cfg.NodeID, n)
		}
		if n := strings.Count(l, "ignoring a node that is not a member of the cluster"); n != 1 {
			t.Errorf("node %d logged the outsider's gossip %d times, want once", nd.cfg.NodeID, n)
		}
	}
}
