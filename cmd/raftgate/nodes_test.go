package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/rpc"
)

// drainingNodes is a node table in which a node being removed stays
// draining for drainLists answers of GET /nodes, then is removed.
type drainingNodes struct {
	mu         sync.Mutex
	nodes      []admin.NodeView
	refuse     string         // reason to refuse an unforced removal, when set
	drainLists int            // GET /nodes answers a node stays draining; -1: removed at once
	left       map[uint64]int // node being removed -> answers left
}

func (d *drainingNodes) Nodes(context.Context) ([]admin.NodeView, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.nodes {
		n := &d.nodes[i]
		if left, ok := d.left[n.ID]; ok && n.State == "draining" {
			if left == 0 {
				n.State, n.Alive, n.Groups = "removed", false, nil
				continue
			}
			d.left[n.ID] = left - 1
		}
	}
	return slices.Clone(d.nodes), nil
}

func (d *drainingNodes) RemoveNode(_ context.Context, id uint64, force bool) (admin.NodeView, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.nodes {
		n := &d.nodes[i]
		if n.ID != id {
			continue
		}
		if d.refuse != "" && !force {
			return admin.NodeView{}, &admin.RefusedError{Reason: d.refuse}
		}
		n.State = "draining"
		if d.drainLists < 0 {
			n.State, n.Alive, n.Groups = "removed", false, nil
		}
		d.left[id] = d.drainLists
		return *n, nil
	}
	return admin.NodeView{}, rpc.ErrNotFound
}

func newDrainingNodes(drainLists int) *drainingNodes {
	roles := func(meta string, parts ...string) []admin.GroupRole {
		gs := []admin.GroupRole{{Group: 0, Role: meta}}
		for i, r := range parts {
			gs = append(gs, admin.GroupRole{Group: uint32(i + 1), Role: r})
		}
		return gs
	}
	return &drainingNodes{drainLists: drainLists, left: map[uint64]int{}, nodes: []admin.NodeView{
		{ID: 1, State: "active", NodeAddr: "127.0.0.1:5122", Ingress: "127.0.0.1:8080", Admin: "127.0.0.1:9070", Zone: "eu-1a", Alive: true,
			Version: "v1.3.0", Groups: roles("voter", "voter", "voter", "voter")},
		{ID: 2, State: "removed", NodeAddr: "127.0.0.1:5222"},
		{ID: 3, State: "active", NodeAddr: "127.0.0.1:5322", Zone: "eu-1b", Alive: true, Version: "v1.3.0",
			Groups: roles("voter", "voter", "outgoing", "voter")},
		{ID: 4, State: "joining", NodeAddr: "127.0.0.1:5422", Alive: true, Groups: roles("learner", "learner", "incoming", "learner")},
	}}
}

// startNodesAdmin serves the real admin API with nodes as its node table.
func startNodesAdmin(t *testing.T, token string, nodes admin.Nodes) *httptest.Server {
	t.Helper()
	h, err := admin.New(admin.Config{Cluster: testCluster{ready: true}, Invocations: noInvocations{},
		Registry: &testRegistry{svcs: map[string]*rpc.Service{}}, Nodes: nodes, Partitions: 3, Token: token, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestNodesList(t *testing.T) {
	url := startNodesAdmin(t, "tok", newDrainingNodes(0)).URL
	res := runCLI(t, "", "nodes", "list", "--admin", url, "--admin-token", "tok")
	if res.code != 0 {
		t.Fatalf("list: exit %d, %s", res.code, res.stderr)
	}
	for _, want := range []string{
		"ID  STATE    ZONE   ALIVE  VERSION  NODE ADDR       INGRESS         ADMIN           METADATA  PARTITIONS",
		"1   active   eu-1a  yes    v1.3.0   127.0.0.1:5122  127.0.0.1:8080  127.0.0.1:9070  voter     voter×3 learner×0\n",
		"2   removed  -      NO     -        127.0.0.1:5222  -               -               -         -\n",
		"3   active   eu-1b  yes    v1.3.0   127.0.0.1:5322  -               -               voter     voter×2 learner×0 outgoing×1\n",
		"4   joining  -      yes    -        127.0.0.1:5422  -               -               learner   voter×0 learner×2 incoming×1\n",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("nodes list lacks %q:\n%s", want, res.stdout)
		}
	}
	t.Log("\n" + res.stdout)

	res = runCLI(t, "", "nodes", "ls", "--json", "--admin", url, "--admin-token", "tok")
	var nodes []admin.NodeView
	if err := json.Unmarshal([]byte(res.stdout), &nodes); res.code != 0 || err != nil || len(nodes) != 4 || nodes[3].Groups[2].Role != "incoming" {
		t.Fatalf("list --json: %v %+v", err, res)
	}
	res = runCLI(t, "", "nodes", "list", "--admin", url)
	if res.code == 0 || !strings.Contains(res.stderr, "list nodes: 401 from admin: missing or wrong admin token") {
		t.Fatalf("without token: %+v", res)
	}
}

func TestNodesRemove(t *testing.T) {
	nodes := newDrainingNodes(1)
	nodes.refuse = "removing node 3 would leave 1 live voter of 3 in partition 2, fewer than a quorum"
	url := startNodesAdmin(t, "", nodes).URL

	res := runCLI(t, "", "nodes", "remove", "3", "--admin", url)
	if res.code != 1 || res.stderr != "raftgate: node 3 was not removed: "+nodes.refuse+" (--force removes it anyway, skipping this check)\n" {
		t.Fatalf("refused removal: %+v", res)
	}
	res = runCLI(t, "", "nodes", "remove", "9", "--admin", url)
	if res.code != 1 || !strings.Contains(res.stderr, "node 9 is not a node of this cluster (raftgate nodes list shows them)") {
		t.Fatalf("unknown node: %+v", res)
	}
	for _, id := range []string{"x", "0", "18446744073709551616"} {
		res = runCLI(t, "", "nodes", "remove", id, "--admin", url)
		if res.code != 1 || !strings.Contains(res.stderr, "malformed node id") {
			t.Fatalf("remove %s: %+v", id, res)
		}
	}

	res = runCLI(t, "", "nodes", "remove", "3", "--force", "--wait", "--admin", url)
	if res.code != 0 || res.stdout != "node 3: draining\nnode 3: removed\nnode 3 is removed; its process stops by itself\n" {
		t.Fatalf("remove --force --wait: %+v", res)
	}

	nodes.refuse = ""
	res = runCLI(t, "", "nodes", "rm", "4", "--admin", url)
	if res.code != 0 || !strings.HasPrefix(res.stdout, "node 4 is draining: it drains, then is removed") {
		t.Fatalf("remove without --wait: %+v", res)
	}
	// A node that holds no replica is removed at once.
	nodes.drainLists = -1
	res = runCLI(t, "", "nodes", "rm", "1", "--wait", "--admin", url)
	if res.code != 0 || res.stdout != "node 1 is removed; its process stops by itself\n" {
		t.Fatalf("remove of a node without replicas: %+v", res)
	}
}

// TestNodesRemoveWaitTimesOut: --wait gives up after --timeout, saying
// the removal goes on.
func TestNodesRemoveWaitTimesOut(t *testing.T) {
	url := startNodesAdmin(t, "", newDrainingNodes(1<<30)).URL
	res := runCLI(t, "", "nodes", "remove", "3", "--wait", "--timeout", "200ms", "--admin", url)
	if res.code != 1 || !strings.Contains(res.stderr, "gave up waiting: node 3 is still draining; the removal goes on") {
		t.Fatalf("wait past the timeout: %+v", res)
	}
}

// TestNodesRemoveWaitAsksAnotherMember: the node whose admin API took
// the removal stops answering right after it (it is the node removed);
// --wait then asks another member's admin API, from the node table.
func TestNodesRemoveWaitAsksAnotherMember(t *testing.T) {
	nodes := newDrainingNodes(1)
	other := startNodesAdmin(t, "", nodes)
	nodes.nodes[2].Admin = strings.TrimPrefix(other.URL, "http://") // node 3 answers for the cluster
	h, err := admin.New(admin.Config{Cluster: testCluster{ready: true}, Invocations: noInvocations{},
		Registry: &testRegistry{svcs: map[string]*rpc.Service{}}, Nodes: nodes, Partitions: 3, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	var stopped atomic.Bool
	removed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stopped.Load() && r.Method == http.MethodGet {
			panic(http.ErrAbortHandler) // the process went away mid-answer
		}
		h.ServeHTTP(w, r)
		stopped.Store(r.Method == http.MethodDelete)
	}))
	t.Cleanup(removed.Close)
	nodes.nodes[0].Admin = strings.TrimPrefix(removed.URL, "http://")

	res := runCLI(t, "", "nodes", "remove", "1", "--wait", "--timeout", "10s", "--admin", removed.URL)
	if res.code != 0 || !strings.HasSuffix(res.stdout, "node 1: removed\nnode 1 is removed; its process stops by itself\n") {
		t.Fatalf("remove --wait of the node asked: %+v", res)
	}
}
