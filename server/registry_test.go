package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"

	"github.com/raftgate/raftgate/raftlog"
)

// metaLeaderAndFollower returns a node that leads the metadata group and
// one that does not.
func metaLeaderAndFollower(t *testing.T, nodes []*Server) (leader, follower *Server) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "a metadata group leader", func() bool {
		leader, follower = nil, nil
		for _, nd := range nodes {
			if nd.raft.Group(raftlog.MetaGroup).Status().IsLeader {
				leader = nd
			} else {
				follower = nd
			}
		}
		return leader != nil && follower != nil
	})
	return leader, follower
}

// TestServiceRegistryReadsAreCurrent (issue 15, items 3 and 4) on a real
// three-node cluster: a removal answered through one node is seen by the
// next call through another (404 at once, nothing accepted); an invocation
// accepted before the removal fails at once with a terminal result; and
// the admin API (and `raftgate services list`) of a node that does not
// lead the metadata group reads its own registrations.
func TestServiceRegistryReadsAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startTestCluster(t, 3)
	svc := newTestService(t)
	leader, follower := metaLeaderAndFollower(t, nodes)
	admin := func(nd *Server) string { return "http://" + nd.cfg.AdminAddr }
	ingress := func(nd *Server) string { return "http://" + nd.cfg.IngressAddr }
	register := func(nd *Server, name string) {
		t.Helper()
		if r := call(t, http.MethodPut, admin(nd)+"/services/"+name, `{"url":"`+svc.srv.URL+`"}`); r.status/100 != 2 {
			t.Fatalf("register %s through node %d: %d %s", name, nd.cfg.NodeID, r.status, r.body)
		}
	}
	remove := func(nd *Server, name string) {
		t.Helper()
		if r := call(t, http.MethodDelete, admin(nd)+"/services/"+name, ""); r.status != http.StatusNoContent {
			t.Fatalf("remove %s through node %d: %d %s", name, nd.cfg.NodeID, r.status, r.body)
		}
	}

	t.Run("removed service refused through another node", func(t *testing.T) {
		for i := range 20 {
			name := fmt.Sprintf("D%d", i)
			register(leader, name)
			if r := call(t, http.MethodPost, ingress(follower)+"/"+name+"/echo", `"hi"`); r.status != 200 {
				t.Fatalf("%s: call before the removal: %d %s", name, r.status, r.body)
			}
			remove(leader, name)
			r := call(t, http.MethodPost, ingress(follower)+"/"+name+"/echo/send", `"late"`)
			if r.status != http.StatusNotFound || !strings.Contains(r.body, "not found") {
				t.Fatalf("%s: send through node %d right after its removal through node %d: %d %s, want 404",
					name, follower.cfg.NodeID, leader.cfg.NodeID, r.status, r.body)
			}
		}
	})

	t.Run("accepted invocation of a removed service fails at once", func(t *testing.T) {
		register(leader, "Later")
		const delay = 2 * time.Second
		sent := time.Now()
		r := call(t, http.MethodPost, ingress(follower)+"/Later/echo/send?delay="+delay.String(), `"x"`)
		if r.status != http.StatusAccepted {
			t.Fatalf("delayed send: %d %s", r.status, r.body)
		}
		id := r.header.Get("x-restate-id")
		remove(leader, "Later")
		if removed := time.Since(sent); removed >= delay {
			t.Fatalf("the removal took until %v after the send: the invocation may rightly have run before", removed)
		}
		start := time.Now()
		r = call(t, http.MethodGet, ingress(follower)+"/restate/invocation/"+id+"/attach?timeout=8s", "")
		if r.status != http.StatusNotFound || r.header.Get("x-restate-error-source") != "invocation" ||
			!strings.Contains(r.body, `service \"Later\" was removed`) {
			t.Fatalf("attach after %v: %d %s, want the invocation's terminal 404", time.Since(start), r.status, r.body)
		}
		if _, delivered := svc.firstSeen(id); delivered {
			t.Fatal("the removed service was called")
		}
		r = call(t, http.MethodGet, admin(follower)+"/invocations/"+id, "")
		var st struct{ Attempts int }
		if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.Attempts != 1 {
			t.Fatalf("status %d %s: want 1 attempt", r.status, r.body)
		}
	})

	t.Run("admin reads its own writes on a metadata follower", func(t *testing.T) {
		for i := range 20 {
			name := fmt.Sprintf("R%d", i)
			register(follower, name)
			if r := call(t, http.MethodGet, admin(follower)+"/services/"+name, ""); r.status != 200 {
				t.Fatalf("GET /services/%s on node %d right after its PUT there: %d %s", name, follower.cfg.NodeID, r.status, r.body)
			}
			remove(follower, name)
			r := call(t, http.MethodGet, admin(follower)+"/services", "")
			if r.status != 200 || strings.Contains(r.body, `"`+name+`"`) {
				t.Fatalf("GET /services on node %d right after removing %s there: %d %s", follower.cfg.NodeID, name, r.status, r.body)
			}
			register(follower, name)
			if r := call(t, http.MethodGet, admin(follower)+"/services", ""); r.status != 200 || !strings.Contains(r.body, `"`+name+`"`) {
				t.Fatalf("GET /services on node %d right after registering %s there: %d %s", follower.cfg.NodeID, name, r.status, r.body)
			}
			remove(follower, name)
		}
	})
}
