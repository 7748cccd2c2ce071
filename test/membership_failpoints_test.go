package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// armedNode is a node started with RAFTGATE_FAILPOINT at a step of a
// configuration change.
type armedNode struct {
	n         *node
	failpoint string
	// logStart is the size of its log when it was armed: "failpoint
	// reached" after it is this failpoint's kill.
	logStart int64
	// next is the environment of its restart (another failpoint, or none).
	next []string
	died bool
}

func failpointEnv(name string) []string { return []string{"RAFTGATE_FAILPOINT=" + name + "@1"} }

// superviseChange waits until done says a configuration change finished,
// restarting each armed node (with its next environment) as soon as it
// killed itself at its failpoint. With all, every armed node must have
// died there; otherwise at least one.
func superviseChange(t *testing.T, c *cluster, what string, armed []*armedNode, all bool, done func() (bool, string)) {
	t.Helper()
	var last string
	testutil.WaitFor(t, 90*time.Second, what, func() bool {
		died := 0
		for _, a := range armed {
			if a.died {
				died++
				continue
			}
			if a.n.alive() {
				continue
			}
			b, _ := os.ReadFile(a.n.logPath)
			if int64(len(b)) < a.logStart || !strings.Contains(string(b[a.logStart:]), "failpoint reached") {
				t.Fatalf("%s: node %d exited without reaching failpoint %s:\n%s", what, a.n.id, a.failpoint, tail(a.n.logPath, 30))
			}
			a.died = true
			died++
			if a.n.id == 0 {
				a.n.id = joinedID(a.n)
			}
			t.Logf("%s: node %d killed itself at %s; restarting it", what, a.n.id, a.failpoint)
			a.n.env = a.next
			c.start(a.n)
			a.n.env = nil
		}
		if (all && died < len(armed)) || died == 0 {
			last = fmt.Sprintf("%d of %d armed nodes died at their failpoint", died, len(armed))
			return false
		}
		ok, desc := done()
		last = desc
		return ok
	})
	t.Logf("%s: %s", what, last)
}

// tableSays reports whether GET /nodes, through any live node of c, says
// what want says (as waitNodes checks it).
func (c *cluster) tableSays(partitions int, want map[uint64]string) (bool, string) {
	for _, via := range c.nodes {
		if !via.alive() {
			continue
		}
		table, err := nodeTable(via)
		if err != nil {
			continue
		}
		if !settledTable(table, partitions, want) {
			return false, fmt.Sprintf("%+v", table)
		}
		return true, fmt.Sprintf("%+v", table)
	}
	return false, "no node answers GET /nodes"
}

// TestMembershipFailpoints: under client load, a node joins while the
// nodes kill themselves (RAFTGATE_FAILPOINT, SIGKILL) at each step of the
// configuration changes it takes, and then a node is removed while the
// group leaders kill themselves just before they propose its removal.
// Each killed node is restarted from its data dir and the change
// finishes: the joiner ends active with the same id, the removed node
// stops by itself. Then, as in the robustness suite, every acknowledged
// invocation has its own result, the histories are linearizable and the
// replicas converge.
//
// Join: node 1 dies after it applied the first add-learner, node 2 after
// the first enter-joint, node 3 after the first leave-joint (each a voter,
// and the leader of some groups, of every group), and the joiner while it
// installs its first snapshot. Removal of node 3: nodes 1, 2 and the
// joiner, restarted with before-remove, die when they first propose the
// removal of a replica of node 3 as a group's leader.
func TestMembershipFailpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const partitions = robustnessPartitions
	joinPoints := map[int]string{1: "after-add-learner", 2: "after-enter-joint", 3: "after-leave-joint"}
	c := startCluster(t, clusterOpts{nodes: 3, partitions: partitions,
		env: func(id int) []string { return failpointEnv(joinPoints[id]) }})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)
	seed := robustnessSeed(t)
	t.Logf("seed %d (replay with RAFTGATE_ROBUSTNESS_SEED=%d)", seed, seed)

	check := func(name string, rt roundTraffic) {
		rt.end()
		for _, n := range c.nodes {
			c.waitReady(n, 30*time.Second)
		}
		if applied, err := c.waitConverged(30 * time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		} else {
			t.Logf("%s: replicas converged at %v", name, applied)
		}
		out := row{failpoint: name, v: validate(c, rt.rec, svc, "Echo")}
		report(t, name, out)
		if out.v.linearizable != "Ok" {
			t.Errorf("%s: linearizable: %s", name, out.v.linearizable)
		}
	}

	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	rt := startRoundTraffic(t, c, seed, 60*time.Second)
	rt.progress(30)
	joiner := c.startJoiner(0, failpointEnv("during-snapshot"))
	// Restarted without a failpoint: the join's balance moves also remove
	// replicas (placement), which before-remove would stop for good.
	var armed []*armedNode
	for _, n := range c.nodes {
		armed = append(armed, &armedNode{n: n, failpoint: joinPoints[n.id]})
	}
	armed = append(armed, &armedNode{n: joiner, failpoint: "during-snapshot"})
	superviseChange(t, c, "join under failpoints", armed, true, func() (bool, string) {
		if joiner.id = joinedID(joiner); joiner.id == 0 {
			return false, "the joiner has no id yet"
		}
		return c.tableSays(partitions, map[uint64]string{1: "active", 2: "active", 3: "active", uint64(joiner.id): "active"})
	})
	c.waitReady(joiner, 30*time.Second)
	rt.progress(30)
	rt.end()
	c.nodes = append(c.nodes, joiner)
	check("join under failpoints", rt)

	// Armed for the removal: restarted (kill -9) with before-remove.
	armed = nil
	for _, n := range []*node{n1, n2, joiner} {
		armed = append(armed, &armedNode{n: n, failpoint: "before-remove", logStart: fileSize(n.logPath)})
		c.kill(n)
		n.env = failpointEnv("before-remove")
		c.start(n)
		n.env = nil
		c.waitReady(n, 30*time.Second)
	}
	rt = startRoundTraffic(t, c, seed+1, 60*time.Second)
	rt.progress(30)
	// Asked through node 3, which no failpoint kills; an operator whose
	// command failed (the metadata leader died answering it) asks again.
	var out []byte
	testutil.WaitFor(t, 30*time.Second, "raftgate nodes remove 3 to succeed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		out, err = exec.CommandContext(ctx, binary, "nodes", "remove", "3", "--admin", n3.adminURL()).CombinedOutput()
		if err != nil {
			t.Logf("raftgate nodes remove 3: %v: %s", err, out)
		}
		return err == nil
	})
	superviseChange(t, c, "removal under failpoints", armed, false, func() (bool, string) {
		if n3.alive() {
			return false, "node 3 still runs"
		}
		return c.tableSays(partitions, map[uint64]string{1: "active", 2: "active", 3: "removed", uint64(joiner.id): "active"})
	})
	if !strings.Contains(tail(n3.logPath, 30), "this node was removed from the cluster") {
		t.Errorf("removed node 3's log does not say so:\n%s", tail(n3.logPath, 20))
	}
	rt.progress(30)
	rt.end()
	c.nodes = slices.DeleteFunc(c.nodes, func(n *node) bool { return n == n3 })
	check("removal under failpoints", rt)
}

// nodeByID is c's node with id.
func (c *cluster) nodeByID(id uint64) *node {
	for _, n := range c.nodes {
		if uint64(n.id) == id {
			return n
		}
	}
	c.t.Fatalf("no node %d", id)
	return nil
}

// metaLeader is the node leading the metadata group (group 0 of GET
// /cluster).
func (c *cluster) metaLeader() *node {
	c.t.Helper()
	var id uint64
	testutil.WaitFor(c.t, 30*time.Second, "a metadata leader", func() bool {
		id = c.leaders()[0]
		return id != 0
	})
	return c.nodeByID(id)
}

// TestMembershipInterrupted: under client load, a join and then a removal
// are interrupted by kill -9 of the node driving them (the metadata
// leader) and of the node they are about, and finished by restarting each
// with the same command and data dir. The joiner dies after the cluster
// gave it an id and before it wrote it down (failpoint after-join-reply):
// restarted, it gets the same id (its identity file's join nonce) and ends
// active, and the cluster has no second new node. The removed node ends
// removed and stops by itself. Every node raised its data dir's format
// once the cluster record existed.
func TestMembershipInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const partitions = robustnessPartitions
	c := startCluster(t, clusterOpts{nodes: 3, partitions: partitions})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)
	seed := robustnessSeed(t)
	t.Logf("seed %d (replay with RAFTGATE_ROBUSTNESS_SEED=%d)", seed, seed)
	check := func(name string, rt roundTraffic) {
		rt.end()
		if applied, err := c.waitConverged(30 * time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		} else {
			t.Logf("%s: replicas converged at %v", name, applied)
		}
		out := row{failpoint: name, v: validate(c, rt.rec, svc, "Echo")}
		report(t, name, out)
		if out.v.linearizable != "Ok" {
			t.Errorf("%s: linearizable: %s", name, out.v.linearizable)
		}
	}

	// Once the cluster record exists, a release without membership can
	// no longer open the data dirs.
	for _, n := range c.nodes {
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("node %d to raise its data dir format", n.id), func() bool {
			return strings.Contains(tail(n.logPath, 1000), "data dir format raised")
		})
	}
	rt := startRoundTraffic(t, c, seed, 60*time.Second)
	rt.progress(30)
	joiner := c.startJoiner(0, failpointEnv("after-join-reply"))
	testutil.WaitFor(t, 60*time.Second, "the joiner to die after the cluster gave it an id", func() bool { return !joiner.alive() })
	if !strings.Contains(tail(joiner.logPath, 20), "failpoint reached") {
		t.Fatalf("the joiner exited without reaching its failpoint:\n%s", tail(joiner.logPath, 30))
	}
	if id := joinedID(joiner); id != 0 {
		t.Fatalf("the joiner wrote id %d before its failpoint", id)
	}
	table, err := nodeTable(c.nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	given := uint64(0)
	for id, v := range table {
		if id > 3 {
			given = id
			t.Logf("the cluster gave the joiner id %d (%s) before it died", id, v.State)
		}
	}
	if given == 0 || len(table) != 4 {
		t.Fatalf("node table after the joiner's death: %+v", table)
	}
	// The joiner comes back with the same command and data dir while the
	// metadata leader, which drives the join, dies in its middle.
	c.start(joiner)
	leader := c.metaLeader()
	testutil.WaitFor(t, 60*time.Second, "the joiner to get its id again", func() bool { return joinedID(joiner) != 0 })
	t.Logf("kill -9 of the metadata leader, node %d, during the join", leader.id)
	c.kill(leader)
	c.restart(leader)
	if joiner.id = joinedID(joiner); uint64(joiner.id) != given {
		t.Fatalf("the joiner restarted with the same data dir got id %d, not %d", joiner.id, given)
	}
	testutil.WaitFor(t, 90*time.Second, "the join to finish", func() bool {
		ok, _ := c.tableSays(partitions, map[uint64]string{1: "active", 2: "active", 3: "active", given: "active"})
		return ok
	})
	if table, err = nodeTable(c.nodes[0]); err != nil || len(table) != 4 {
		t.Fatalf("node table after the join: %+v %v", table, err)
	}
	c.waitReady(joiner, 30*time.Second)
	rt.progress(30)
	rt.end()
	c.nodes = append(c.nodes, joiner)
	check("join interrupted", rt)

	rt = startRoundTraffic(t, c, seed+1, 60*time.Second)
	rt.progress(30)
	leader = c.metaLeader()
	var removed *node
	for _, n := range c.nodes {
		if n != leader && n != joiner {
			removed = n
			break
		}
	}
	var via *node
	for _, n := range c.nodes {
		if n != leader && n != removed {
			via = n
			break
		}
	}
	if out, err := exec.Command(binary, "nodes", "remove", fmt.Sprint(removed.id), "--admin", via.adminURL()).CombinedOutput(); err != nil {
		t.Fatalf("raftgate nodes remove %d: %v\n%s", removed.id, err, out)
	}
	table, _ = nodeTable(via)
	t.Logf("kill -9 of the metadata leader, node %d, then of node %d, while node %d is %s", leader.id, removed.id, removed.id, table[uint64(removed.id)].State)
	c.kill(leader)
	c.restart(leader)
	c.kill(removed)
	c.start(removed) // it may stop by itself before it is ready
	want := map[uint64]string{uint64(removed.id): "removed"}
	for _, n := range c.nodes {
		if n != removed {
			want[uint64(n.id)] = "active"
		}
	}
	testutil.WaitFor(t, 90*time.Second, "the removal to finish", func() bool {
		ok, _ := c.tableSays(partitions, want)
		return ok && !removed.alive()
	})
	if !strings.Contains(tail(removed.logPath, 30), "this node was removed from the cluster") {
		t.Errorf("removed node %d's log does not say so:\n%s", removed.id, tail(removed.logPath, 20))
	}
	rt.progress(30)
	rt.end()
	c.nodes = slices.DeleteFunc(c.nodes, func(n *node) bool { return n == removed })
	check("removal interrupted", rt)
}
