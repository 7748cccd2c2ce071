package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFourthNodeNamedInInitialClusterSaysSo: a fourth node started next to
// a running three-node cluster, with an --initial-cluster that names it,
// can never become a member (the voters are fixed when a cluster first
// starts). Its peers refuse its raft messages; it says why and what to do
// in its first warning, and exits with that error rather than write pages
// of election chatter.
func TestFourthNodeNamedInInitialClusterSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions})
	base := t.TempDir()
	n4 := &node{
		id:          4,
		dataDir:     filepath.Join(base, "node4"),
		logPath:     filepath.Join(base, "node4.log"),
		ingressAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		adminAddr:   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		nodeAddr:    fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		gossipAddr:  fmt.Sprintf("127.0.0.1:%d", freePort(t)),
	}
	var join []string
	for _, n := range c.nodes {
		join = append(join, n.gossipAddr)
	}
	n4.extraArgs = []string{"server", "--node-id", "4", "--data-dir", n4.dataDir,
		"--ingress-addr", n4.ingressAddr, "--admin-addr", n4.adminAddr, "--node-addr", n4.nodeAddr, "--gossip-addr", n4.gossipAddr,
		"--initial-cluster", c.initial + ",4=" + n4.nodeAddr, "--join", strings.Join(join, ","), "--shutdown-grace", "2s"}
	c.start(n4)
	t.Cleanup(func() { c.kill(n4) })
	select {
	case <-n4.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the fourth node still runs after 30s:\n%s", tail(n4.logPath, 40))
	}
	b, err := os.ReadFile(n4.logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	first := -1
	for i, line := range lines {
		if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatalf("the fourth node logged no warning:\n%s", tail(n4.logPath, 40))
	}
	for _, want := range []string{"not one of the voters of the cluster", "does not join by naming itself in --initial-cluster: it joins with --join"} {
		if !strings.Contains(lines[first], want) {
			t.Errorf("the fourth node's first warning does not say %q:\n%s", want, lines[first])
		}
	}
	if len(lines) > 150 {
		t.Errorf("the fourth node wrote %d lines before it stopped: its warning is drowned", len(lines))
	}
	if !strings.Contains(string(b), "stopping: this node is not a member of the cluster its peers run") {
		t.Errorf("the fourth node did not say why it stops:\n%s", tail(n4.logPath, 20))
	}
	t.Logf("the fourth node exited after %d log lines; its first warning (line %d): %s", len(lines), first+1, lines[first])
}
