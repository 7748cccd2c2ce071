package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/raftgate/raftgate/rpc"
)

// fakeNodes is a node table; RemoveNode marks a node draining unless
// refuse names a reason for it.
type fakeNodes struct {
	mu      sync.Mutex
	nodes   []NodeView
	refuse  map[uint64]string // an unforced RemoveNode of the node answers a *RefusedError with it
	err     error             // returned by every call when set
	removed []string          // "id force=bool" of each removal started
}

func (f *fakeNodes) Nodes(ctx context.Context) ([]NodeView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.nodes), nil
}

func (f *fakeNodes) RemoveNode(ctx context.Context, id uint64, force bool) (NodeView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return NodeView{}, f.err
	}
	for i := range f.nodes {
		if f.nodes[i].ID != id {
			continue
		}
		if reason, ok := f.refuse[id]; ok && !force {
			return NodeView{}, &RefusedError{Reason: reason}
		}
		f.nodes[i].State = "draining"
		f.removed = append(f.removed, fmt.Sprintf("%d force=%t", id, force))
		return f.nodes[i], nil
	}
	return NodeView{}, rpc.ErrNotFound
}

func threeNodes() []NodeView {
	return []NodeView{
		{ID: 1, State: "active", NodeAddr: "127.0.0.1:5122", Ingress: "127.0.0.1:8080", Admin: "127.0.0.1:9070", Zone: "a", Alive: true, Version: "v1.2.0",
			Groups: []GroupRole{{Group: 0, Role: "voter"}, {Group: 1, Role: "voter"}}},
		{ID: 2, State: "active", NodeAddr: "127.0.0.1:5222", Zone: "b", Alive: true, Version: "v1.2.0",
			Groups: []GroupRole{{Group: 0, Role: "voter"}, {Group: 1, Role: "learner"}}},
		{ID: 3, State: "removed", NodeAddr: "127.0.0.1:5322"},
	}
}

func TestNodesListAndRemove(t *testing.T) {
	nodes := &fakeNodes{nodes: threeNodes()}
	f := newFixture(t, func(c *Config) { c.Nodes = nodes })

	a := f.do(t, "GET", "/nodes", "")
	if a.status != http.StatusOK {
		t.Fatalf("GET /nodes: %d %s", a.status, a.body)
	}
	got := decode[[]NodeView](t, a)
	if len(got) != 3 || !slices.Equal(got[1].Groups, threeNodes()[1].Groups) || got[0].Zone != "a" || got[2].State != "removed" {
		t.Fatalf("GET /nodes: %+v", got)
	}
	// A node in no group shows an empty list, not null.
	if !strings.Contains(string(a.body), `"groups": []`) {
		t.Fatalf("removed node's groups not []: %s", a.body)
	}
	for _, field := range []string{`"id"`, `"state"`, `"nodeAddr"`, `"ingress"`, `"admin"`, `"zone"`, `"alive"`, `"version"`, `"group"`, `"role"`} {
		if !strings.Contains(string(a.body), field) {
			t.Errorf("GET /nodes lacks field %s: %s", field, a.body)
		}
	}

	a = f.do(t, "DELETE", "/nodes/2", "")
	if v := decode[NodeView](t, a); a.status != http.StatusAccepted || v.ID != 2 || v.State != "draining" {
		t.Fatalf("DELETE /nodes/2: %d %s", a.status, a.body)
	}
	a = f.do(t, "DELETE", "/nodes/1?force=1", "")
	if a.status != http.StatusAccepted || !slices.Equal(nodes.removed, []string{"2 force=false", "1 force=true"}) {
		t.Fatalf("DELETE /nodes/1?force=1: %d %s, removals %q", a.status, a.body, nodes.removed)
	}

	wantError(t, f.do(t, "DELETE", "/nodes/9", ""), http.StatusNotFound, "node 9 is not in the cluster's node table")
	for _, path := range []string{"/nodes/x", "/nodes/0", "/nodes/-1", "/nodes/18446744073709551616"} {
		wantError(t, f.do(t, "DELETE", path, ""), http.StatusBadRequest, "malformed node id")
	}
	wantError(t, f.do(t, "DELETE", "/nodes/2?force=maybe", ""), http.StatusBadRequest, "malformed force")
	a = f.do(t, "GET", "/nodes/2", "")
	if wantError(t, a, http.StatusMethodNotAllowed, "not allowed"); a.header.Get("Allow") != "DELETE" {
		t.Fatalf("Allow %q", a.header.Get("Allow"))
	}
	wantError(t, f.do(t, "POST", "/nodes", ""), http.StatusMethodNotAllowed, "not allowed")
}

func TestRemoveNodeRefusedAndRetryable(t *testing.T) {
	const reason = "removing node 2 would leave 1 live voter of 3 in partition 1, fewer than a quorum"
	nodes := &fakeNodes{nodes: threeNodes(), refuse: map[uint64]string{2: reason}}
	f := newFixture(t, func(c *Config) { c.Nodes = nodes })

	wantError(t, f.do(t, "DELETE", "/nodes/2", ""), http.StatusConflict, reason)
	if a := f.do(t, "DELETE", "/nodes/2?force=true", ""); a.status != http.StatusAccepted {
		t.Fatalf("forced removal: %d %s", a.status, a.body)
	}

	for _, err := range []error{&rpc.NotLeaderError{Leader: 2, Term: 3}, rpc.ErrLostLeadership, rpc.ErrUnavailable} {
		nodes.err = err
		for _, req := range [][2]string{{"DELETE", "/nodes/1"}, {"GET", "/nodes"}} {
			a := f.do(t, req[0], req[1], "")
			wantError(t, a, http.StatusServiceUnavailable, "retrying is safe")
			if a.header.Get("Retry-After") == "" {
				t.Fatalf("%s %s: 503 without Retry-After", req[0], req[1])
			}
		}
	}
	nodes.err = errors.New("disk on fire")
	wantError(t, f.do(t, "DELETE", "/nodes/1", ""), http.StatusInternalServerError, "remove node 1: disk on fire")
	// The refusal is found however the implementation wraps it.
	nodes.err = errors.Join(errors.New("planner"), &RefusedError{Reason: "version gate: node 3 runs v1.1"})
	wantError(t, f.do(t, "DELETE", "/nodes/1", ""), http.StatusConflict, "version gate: node 3 runs v1.1")
}

func TestNodesWithoutMembership(t *testing.T) {
	f := newFixture(t, nil)
	wantError(t, f.do(t, "GET", "/nodes", ""), http.StatusNotImplemented, "does not serve the node table")
	wantError(t, f.do(t, "DELETE", "/nodes/2", ""), http.StatusNotImplemented, "does not serve the node table")
}

func TestNodesNeedTheToken(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Token = "s3cret"; c.Nodes = &fakeNodes{nodes: threeNodes()} })
	wantError(t, f.do(t, "GET", "/nodes", ""), http.StatusUnauthorized, "admin token")
	wantError(t, f.do(t, "DELETE", "/nodes/2", ""), http.StatusUnauthorized, "admin token")
	if a := f.do(t, "GET", "/nodes", "", "Authorization", "Bearer s3cret"); a.status != http.StatusOK {
		t.Fatalf("with token: %d %s", a.status, a.body)
	}
}
