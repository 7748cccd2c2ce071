package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runRefused runs a server process that must refuse to start, and returns
// its output.
func runRefused(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after 60 s:\n%s", args, out)
	}
	if err == nil {
		t.Fatalf("%v started:\n%s", args, out)
	}
	return string(out)
}

func addrsArgs(t *testing.T) []string {
	return []string{
		"--ingress-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--node-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
	}
}

// TestMembershipRefusals: the starts that would mix up identities are
// refused, each with a line that says what is wrong: a data dir with data
// but no identity started to join; a data dir of another cluster; a node
// started with the id of a node the cluster removed (on an empty data
// dir, so nothing of its own tells it).
func TestMembershipRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	c := startCluster(t, clusterOpts{nodes: 3, partitions: 2})
	n1 := c.nodes[0]
	c.waitNodes(n1, 2, map[uint64]string{1: "active", 2: "active", 3: "active"})

	// Data, no identity, no --node-id: not a node that joined.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runRefused(t, append([]string{"server", "--data-dir", dir, "--join", n1.gossipAddr}, addrsArgs(t)...)...)
	if !strings.Contains(out, "holds data but no identity.json") {
		t.Errorf("a data dir without identity: %s", out)
	}

	// A data dir of another cluster: node 3's, with another cluster's
	// identity put in it.
	other := startCluster(t, clusterOpts{nodes: 1, partitions: 2})
	other.waitNodes(other.nodes[0], 2, map[uint64]string{1: "active"})
	c.kill(c.nodes[2])
	foreign, err := os.ReadFile(filepath.Join(other.nodes[0].dataDir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	foreign = []byte(strings.Replace(string(foreign), `"nodeId": 1`, `"nodeId": 3`, 1))
	if err := os.WriteFile(filepath.Join(c.nodes[2].dataDir, "identity.json"), foreign, 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(c.nodes[2].logPath)
	c.start(c.nodes[2])
	select {
	case <-c.nodes[2].exited:
	case <-time.After(60 * time.Second):
		t.Fatal("node 3 with another cluster's identity did not stop")
	}
	b, _ := os.ReadFile(c.nodes[2].logPath)
	if again := string(b[before.Size():]); !strings.Contains(again, "belongs to cluster") {
		t.Errorf("node 3 with another cluster's identity: %s", tail(c.nodes[2].logPath, 10))
	}

	// Node 3 removed; a process started as node 3 on an empty data dir.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, binary, "nodes", "remove", "3", "--force", "--wait", "--admin", n1.adminURL()).CombinedOutput(); err != nil {
		t.Fatalf("raftgate nodes remove 3: %v\n%s", err, out)
	}
	n3 := c.nodes[2]
	out = runRefused(t, "server", "--node-id", "3", "--data-dir", t.TempDir(), "--initial-cluster", c.initial,
		"--join", n1.gossipAddr, "--ingress-addr", n3.ingressAddr, "--admin-addr", n3.adminAddr,
		"--node-addr", n3.nodeAddr, "--gossip-addr", n3.gossipAddr)
	if !strings.Contains(out, "this node was removed from the cluster") {
		t.Errorf("a removed id started again: %s", out)
	}
}
