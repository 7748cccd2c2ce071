package leadership

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestRestartedNodeIsAliveAgain: a node that left and comes back on the same
// gossip address (a process restart) is listed alive again.
func TestRestartedNodeIsAliveAgain(t *testing.T) {
	nodes := startCluster(t)
	cfg := nodes[2].cfg
	if err := nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "node 3 not alive", func() bool {
		m, _ := nodes[0].Node(3)
		return !m.Alive
	})
	cfg.Join = []string{gossipAddr(nodes[0])}
	cfg.Logger = zerolog.Nop()
	again, err := Start(cfg)
	if err != nil {
		// The port was taken meanwhile: come back on another address, which
		// memberlist accepts once DeadNodeReclaimTime has passed.
		t.Logf("restart on %s: %v; using a fresh port", cfg.BindAddr, err)
		cfg.BindAddr = freeGossipAddr(t)
		if again, err = Start(cfg); err != nil {
			t.Fatalf("restart node 3 on %s: %v", cfg.BindAddr, err)
		}
	}
	t.Cleanup(func() { again.Close() })
	testutil.WaitFor(t, 10*time.Second, "restarted node 3 alive on nodes 1 and 2", func() bool {
		for _, n := range nodes[:2] {
			if m, _ := n.Node(3); !m.Alive {
				return false
			}
		}
		return true
	})
}
