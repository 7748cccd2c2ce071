package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestCallFallsBackToAttachWhenLeaderMoves: a call waiting at its
// partition's leader when that leadership moves is answered appended
// without result; the ingress attaches by id at the new leader and answers
// the result once.
func TestCallFallsBackToAttachWhenLeaderMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startTestCluster(t, 3)
	svc := newTestService(t)
	if r := call(t, http.MethodPut, "http://"+nodes[0].cfg.AdminAddr+"/services/Echo", `{"url":"`+svc.srv.URL+`"}`); r.status/100 != 2 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	in := nodes[0]
	testutil.WaitFor(t, 10*time.Second, "registry", func() bool { _, ok := in.registry.Lookup("Echo"); return ok })
	before := clientCalls(t, in)
	answered := make(chan reply, 1)
	go func() {
		r := testutil.Do(t, http.MethodPost, "http://"+in.cfg.IngressAddr+"/Echo/slow", `"moved"`)
		answered <- reply{r.Status, r.Header, string(r.Body)}
	}()
	var leader *Server
	testutil.WaitFor(t, 10*time.Second, "the call waiting at its leader", func() bool {
		for _, nd := range nodes {
			if attachWaiters(t, nd) > 0 {
				leader = nd
				return true
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := leader.raft.TransferAll(ctx); err != nil {
		t.Fatalf("moving node %d's leaderships: %v", leader.cfg.NodeID, err)
	}
	// The attach's waiter at the new leader (the call's counts only when
	// it ends).
	testutil.WaitFor(t, 10*time.Second, "the ingress attaching by id at the new leader", func() bool {
		for _, nd := range nodes {
			if nd != leader && attachWaiters(t, nd) > 0 {
				return true
			}
		}
		return false
	})
	svc.once.Do(func() { close(svc.release) })
	r := <-answered
	if r.status != http.StatusOK || r.body != `"moved"` || r.header.Get("x-restate-id") == "" {
		t.Fatalf("call across a leader change = %d %q", r.status, r.body)
	}
	after := clientCalls(t, in)
	if calls, attaches := after["call"]-before["call"], after["attach"]-before["attach"]; calls != 1 || attaches != 1 {
		t.Fatalf("%v call requests and %v attaches, want one of each", calls, attaches)
	}
}

// clientCalls reads raftgate_dispatch_client_calls_total by op from nd's
// /metrics.
func clientCalls(t *testing.T, nd *Server) map[string]float64 {
	return DispatchCalls(t, nd.cfg.AdminAddr)
}

// DispatchCalls reads raftgate_dispatch_client_calls_total by op from the
// /metrics of the node whose admin API is at admin (exported for the
// package's external tests).
func DispatchCalls(t *testing.T, admin string) map[string]float64 {
	r := call(t, http.MethodGet, "http://"+admin+"/metrics", "")
	out := map[string]float64{}
	const prefix = `raftgate_dispatch_client_calls_total{op="`
	for _, line := range strings.Split(r.body, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		var v float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		out[rest[:strings.IndexByte(rest, '"')]] += v
	}
	return out
}
