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
		for id, state := range want {
			v, ok := table[id]
			if !ok || v.State != state {
				return false, fmt.Sprintf("%+v", table)
			}
			voter := 0
			for _, g := range v.Groups {
				if g.Role == "voter" {
					voter++
				}
			}
			if state == "active" && voter != partitions+1 {
				return false, fmt.Sprintf("%+v", table)
			}
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
	var armed []*armedNode
	for _, n := range c.nodes {
		a := &armedNode{n: n, failpoint: joinPoints[n.id]}
		if n != n3 {
			a.next = failpointEnv("before-remove")
		}
		armed = append(armed, a)
	}
	armed = append(armed, &armedNode{n: joiner, failpoint: "during-snapshot", next: failpointEnv("before-remove")})
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

	rt = startRoundTraffic(t, c, seed+1, 60*time.Second)
	rt.progress(30)
	armed = nil
	for _, n := range []*node{n1, n2, joiner} {
		armed = append(armed, &armedNode{n: n, failpoint: "before-remove", logStart: fileSize(n.logPath)})
	}
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
