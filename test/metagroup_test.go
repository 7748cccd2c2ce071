package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestMetadataGroupGrowsAndShrinks: a one-node cluster grows to six nodes
// one join at a time and shrinks back to three with `raftgate nodes
// remove`, while a client registers services through one node and reads
// each back through another right after the answer. The metadata group
// keeps a voter on every node up to five, and learners beyond; every read
// after an acknowledged registration finds it (the registry stays
// linearizable through every configuration change); none is lost.
func TestMetadataGroupGrowsAndShrinks(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	c := startCluster(t, clusterOpts{nodes: 1, partitions: 2})
	var mu sync.Mutex
	live := []*node{c.nodes[0]}
	var acked []string
	var problems []string
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			mu.Lock()
			nodes := slices.Clone(live)
			mu.Unlock()
			via, read := nodes[i%len(nodes)], nodes[(i+1)%len(nodes)]
			name := fmt.Sprintf("S%d", i)
			body, _ := json.Marshal(map[string]any{"url": "http://127.0.0.1:9"})
			r, err := do(ctx, http.MethodPut, via.adminURL()+"/services/"+name, body, nil)
			if err != nil || r.status/100 != 2 {
				continue // not acknowledged: a leader change, a node leaving
			}
			g, err := do(ctx, http.MethodGet, read.adminURL()+"/services/"+name, nil, nil)
			mu.Lock()
			acked = append(acked, name)
			if err == nil && g.status == http.StatusNotFound {
				problems = append(problems, fmt.Sprintf("%s registered through node %d, not found through node %d", name, via.id, read.id))
			}
			mu.Unlock()
		}
	}()
	metaRoles := func(n *node) (voters, learners int, ok bool) {
		table, err := nodeTable(n)
		if err != nil {
			return 0, 0, false
		}
		for _, v := range table {
			for _, g := range v.Groups {
				if g.Group != 0 {
					continue
				}
				switch g.Role {
				case "voter":
					voters++
				case "learner":
					learners++
				}
			}
		}
		return voters, learners, true
	}
	waitMeta := func(voters, learners int) {
		t.Helper()
		testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("the metadata group to have %d voters and %d learners", voters, learners), func() bool {
			v, l, ok := metaRoles(c.nodes[0])
			return ok && v == voters && l == learners
		})
	}
	waitMeta(1, 0)
	for size := 2; size <= 6; size++ {
		n := c.joinNode(0)
		c.nodes = append(c.nodes, n)
		mu.Lock()
		live = append(live, n)
		mu.Unlock()
		waitMeta(min(size, 5), max(size-5, 0))
		t.Logf("%d nodes: the metadata group has %d voters", size, min(size, 5))
	}
	for _, id := range []int{2, 3, 4} {
		n := c.nodes[slices.IndexFunc(c.nodes, func(n *node) bool { return n.id == id })]
		mu.Lock()
		live = slices.DeleteFunc(live, func(m *node) bool { return m == n })
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		out, err := exec.CommandContext(ctx, binary, "nodes", "remove", fmt.Sprint(id), "--wait", "--admin", c.nodes[0].adminURL()).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("raftgate nodes remove %d: %v\n%s", id, err, out)
		}
		select {
		case <-n.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("removed node %d did not stop", id)
		}
	}
	c.nodes = slices.DeleteFunc(c.nodes, func(n *node) bool { return !n.alive() })
	waitMeta(3, 0)
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	for _, n := range c.nodes {
		r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/services", nil, nil)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("GET /services through node %d: %v %+v", n.id, err, r)
		}
		var list struct {
			Services []struct {
				Name string `json:"name"`
			} `json:"services"`
		}
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range list.Services {
			names = append(names, s.Name)
		}
		for _, name := range acked {
			if !slices.Contains(names, name) {
				t.Errorf("node %d does not list %s, registered and acknowledged", n.id, name)
			}
		}
	}
	t.Logf("%d registrations acknowledged and read back across the changes", len(acked))
}
