package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// nodeView is one row of GET /nodes.
type nodeView struct {
	ID     uint64 `json:"id"`
	State  string `json:"state"`
	Alive  bool   `json:"alive"`
	Groups []struct {
		Group uint32 `json:"group"`
		Role  string `json:"role"`
	} `json:"groups"`
}

// nodeTable reads GET /nodes through n.
func nodeTable(n *node) (map[uint64]nodeView, error) {
	r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/nodes", nil, nil)
	if err != nil {
		return nil, err
	}
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("GET /nodes: %d %s", r.status, r.body)
	}
	var rows []nodeView
	if err := json.Unmarshal(r.body, &rows); err != nil {
		return nil, err
	}
	out := map[uint64]nodeView{}
	for _, v := range rows {
		out[v.ID] = v
	}
	return out, nil
}

// waitNodes waits until GET /nodes through via says what want says of
// each node's state, and the placement settled: every active node a voter
// of the metadata group, every partition on min(3, active nodes) voters
// and nothing else, and the replicas per active node within one of even.
func (c *cluster) waitNodes(via *node, partitions int, want map[uint64]string) {
	c.t.Helper()
	var last string
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("last node table: %s", last)
		}
	})
	testutil.WaitFor(c.t, 90*time.Second, fmt.Sprintf("the node table to be %v, placement settled", want), func() bool {
		table, err := nodeTable(via)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%+v", table)
		return settledTable(table, partitions, want)
	})
	c.t.Logf("node table: %s", last)
}

// settledTable reports whether table gives each node of want its state,
// and the placement settled: every active node a voter of the metadata
// group, every partition on min(3, active nodes) voters and nothing else,
// and the replicas per active node within one of even.
func settledTable(table map[uint64]nodeView, partitions int, want map[uint64]string) bool {
	for id, state := range want {
		if v, ok := table[id]; !ok || v.State != state {
			return false
		}
	}
	activeCount := 0
	voters := map[uint32]int{}
	perNode := map[uint64]int{}
	for _, v := range table {
		if v.State != "active" {
			if len(v.Groups) > 0 {
				return false
			}
			continue
		}
		activeCount++
		perNode[v.ID] = 0
		meta := false
		for _, g := range v.Groups {
			if g.Role != "voter" {
				return false
			}
			if g.Group == 0 {
				meta = true
				continue
			}
			voters[g.Group]++
			perNode[v.ID]++
		}
		if !meta {
			return false
		}
	}
	for p := 1; p <= partitions; p++ {
		if voters[uint32(p)] != min(3, activeCount) {
			return false
		}
	}
	lo, hi := partitions, 0
	for _, n := range perNode {
		lo, hi = min(lo, n), max(hi, n)
	}
	return hi-lo <= 1
}

// joinNode starts a new server process that joins the cluster (no
// --node-id, no --initial-cluster, an empty data dir), replacing node
// replace when not 0, and waits until it serves. Its id is the one the
// cluster gave it (its identity file).
func (c *cluster) joinNode(replace int, extra ...string) *node {
	c.t.Helper()
	n := c.startJoiner(replace, nil, extra...)
	c.waitReady(n, 90*time.Second)
	if n.id = joinedID(n); n.id == 0 {
		c.t.Fatalf("joined node has no identity")
	}
	return n
}

// startJoiner starts a joining node's process (see joinNode), with env
// added to its environment at this first start only, and extra flags, and
// returns at once.
func (c *cluster) startJoiner(replace int, env []string, extra ...string) *node {
	c.t.Helper()
	base := c.t.TempDir()
	n := &node{
		dataDir:     filepath.Join(base, "data"),
		logPath:     filepath.Join(base, "node.log"),
		ingressAddr: fmt.Sprintf("127.0.0.1:%d", freePort(c.t)),
		adminAddr:   fmt.Sprintf("127.0.0.1:%d", freePort(c.t)),
		nodeAddr:    fmt.Sprintf("127.0.0.1:%d", freePort(c.t)),
		gossipAddr:  fmt.Sprintf("127.0.0.1:%d", freePort(c.t)),
		env:         env,
	}
	var gossip []string
	for _, m := range c.nodes {
		if m.alive() {
			gossip = append(gossip, m.gossipAddr)
		}
	}
	n.extraArgs = []string{"server", "--data-dir", n.dataDir,
		"--ingress-addr", n.ingressAddr, "--admin-addr", n.adminAddr,
		"--node-addr", n.nodeAddr, "--gossip-addr", n.gossipAddr,
		"--join", strings.Join(gossip, ","), "--shutdown-grace", "5s"}
	if replace != 0 {
		n.extraArgs = append(n.extraArgs, "--replace", fmt.Sprint(replace))
	}
	n.extraArgs = append(n.extraArgs, extra...)
	c.start(n)
	n.env = nil
	c.t.Cleanup(func() {
		if n.alive() {
			c.signal(n, 9)
			<-n.exited
		}
	})
	return n
}

// joinedID is the id in a joined node's identity file; 0 while it has
// none.
func joinedID(n *node) int {
	var id struct {
		NodeID int `json:"nodeId"`
	}
	b, err := os.ReadFile(filepath.Join(n.dataDir, "identity.json"))
	if err != nil || json.Unmarshal(b, &id) != nil {
		return 0
	}
	return id.NodeID
}

// TestMembershipChangesUnderLoad: under client load with idempotency
// keys, a three-node cluster grows to four (a node joins with --join and
// an empty data dir), a node killed with kill -9 whose disk is lost is
// replaced by a new machine (--replace), and a node is removed with
// `raftgate nodes remove --wait`: it stops by itself and, restarted on its
// old data dir, stops again with a message. After each change every
// acknowledged invocation has its own result, each key one id, the
// histories are linearizable and the replicas converge.
func TestMembershipChangesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const partitions = robustnessPartitions
	c := startCluster(t, clusterOpts{nodes: 3, partitions: partitions})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	c.waitNodes(n1, partitions, map[uint64]string{1: "active", 2: "active", 3: "active"})
	seed := robustnessSeed(t)

	// round runs client traffic over the cluster's nodes while change
	// runs, then checks the history. The traffic reads c.nodes: change
	// returns the nodes after it, which take c.nodes's place once the
	// traffic stopped.
	round := func(name string, change func() []*node) {
		rt := startRoundTraffic(t, c, seed, 60*time.Second)
		rt.progress(30)
		nodes := change()
		rt.progress(30)
		rt.end()
		c.nodes = nodes
		out := row{failpoint: name}
		if applied, err := c.waitConverged(30 * time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		} else {
			t.Logf("%s: replicas converged at %v", name, applied)
		}
		out.v = validate(c, rt.rec, svc, "Echo")
		report(t, name, out)
		if out.v.linearizable != "Ok" {
			t.Errorf("%s: linearizable: %s", name, out.v.linearizable)
		}
	}

	var n4 *node
	round("grow 3 → 4", func() []*node {
		n4 = c.joinNode(0)
		c.waitNodes(n1, partitions, map[uint64]string{1: "active", 2: "active", 3: "active", uint64(n4.id): "active"})
		return append(slices.Clone(c.nodes), n4)
	})

	round("replace a lost node", func() []*node {
		c.kill(n3)
		if err := os.RemoveAll(n3.dataDir); err != nil {
			t.Fatal(err)
		}
		n5 := c.joinNode(n3.id)
		c.waitNodes(n1, partitions, map[uint64]string{uint64(n3.id): "removed", uint64(n5.id): "active", 1: "active", 2: "active", uint64(n4.id): "active"})
		nodes := slices.DeleteFunc(slices.Clone(c.nodes), func(n *node) bool { return n == n3 })
		return append(nodes, n5) // the next round's traffic uses it
	})

	round("remove a node", func() []*node {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, "nodes", "remove", "1", "--wait", "--admin", n2.adminURL()).CombinedOutput()
		if err != nil {
			t.Fatalf("raftgate nodes remove 1 --wait: %v\n%s", err, out)
		}
		select {
		case <-n1.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("removed node 1 did not stop by itself:\n%s", tail(n1.logPath, 20))
		}
		const says = "this node was removed from the cluster"
		if !strings.Contains(tail(n1.logPath, 30), says) {
			t.Errorf("removed node 1's log does not say %q:\n%s", says, tail(n1.logPath, 20))
		}
		return slices.DeleteFunc(slices.Clone(c.nodes), func(n *node) bool { return n == n1 })
	})

	// The removed node, restarted on its old data dir, cannot come back.
	before, err := os.Stat(n1.logPath)
	if err != nil {
		t.Fatal(err)
	}
	c.start(n1)
	select {
	case <-n1.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("node 1 restarted after its removal did not stop:\n%s", tail(n1.logPath, 20))
	}
	b, _ := os.ReadFile(n1.logPath)
	if again := string(b[before.Size():]); !strings.Contains(again, "this node was removed from the cluster") {
		t.Errorf("the removed node's restart does not say it was removed:\n%s", tail(n1.logPath, 20))
	}
	table, err := nodeTable(n2)
	if err != nil {
		t.Fatal(err)
	}
	if table[1].State != "removed" || table[1].Alive {
		t.Errorf("node 1 after its restart: %+v", table[1])
	}
}
