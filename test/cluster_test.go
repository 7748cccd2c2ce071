package test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestCallSendAttachAcrossNodes drives the ingress of each node of a real
// three-process cluster: a call through one node, a send through another,
// attach and output through a third, idempotency through all.
func TestCallSendAttachAcrossNodes(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3})
	rec := newRecorder(t)
	c.registerService(c.nodes[0], "Echo", rec.srv.URL)
	ctx := context.Background()
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]

	r, err := do(ctx, http.MethodPost, n1.ingressURL()+"/Echo/echo", []byte(`"hi"`), nil)
	if err != nil || r.status != http.StatusOK || string(r.body) != `"hi"` {
		t.Fatalf("call: %v %+v", err, r)
	}
	callID := r.header.Get("x-restate-id")
	if callID == "" {
		t.Fatal("call: no x-restate-id")
	}

	r, err = do(ctx, http.MethodPost, n2.ingressURL()+"/Echo/echo/send", []byte(`"sent"`), map[string]string{"idempotency-key": "k1"})
	if err != nil || r.status != http.StatusAccepted {
		t.Fatalf("send: %v %+v", err, r)
	}
	var sr sendResult
	if err := json.Unmarshal(r.body, &sr); err != nil || sr.Status != "Accepted" || sr.InvocationID == "" {
		t.Fatalf("send body %s: %v", r.body, err)
	}

	r, err = do(ctx, http.MethodGet, n3.ingressURL()+"/restate/invocation/"+sr.InvocationID+"/attach", nil, nil)
	if err != nil || r.status != http.StatusOK || string(r.body) != `"sent"` {
		t.Fatalf("attach via another node: %v %+v", err, r)
	}
	r, err = do(ctx, http.MethodGet, n1.ingressURL()+"/restate/invocation/"+callID+"/output", nil, nil)
	if err != nil || r.status != http.StatusOK || string(r.body) != `"hi"` {
		t.Fatalf("output of the call via node 1: %v %+v", err, r)
	}
	r, err = do(ctx, http.MethodGet, n1.ingressURL()+"/restate/invocation/Echo/echo/k1/output", nil, nil)
	if err != nil || r.status != http.StatusOK || string(r.body) != `"sent"` {
		t.Fatalf("output by idempotency key: %v %+v", err, r)
	}
	if exp := r.header.Get("idempotency-expires"); exp == "" {
		t.Errorf("output by key: no idempotency-expires header")
	} else if _, err := time.Parse(time.RFC3339, exp); err != nil {
		t.Errorf("idempotency-expires %q: %v", exp, err)
	}

	// The same key again, through the third node: the original invocation.
	r, err = do(ctx, http.MethodPost, n3.ingressURL()+"/Echo/echo/send", []byte(`"other"`), map[string]string{"idempotency-key": "k1"})
	if err != nil || r.status != http.StatusAccepted {
		t.Fatalf("second send: %v %+v", err, r)
	}
	var sr2 sendResult
	json.Unmarshal(r.body, &sr2)
	if sr2.InvocationID != sr.InvocationID || sr2.Status != "PreviouslyAccepted" {
		t.Fatalf("second send with the same key = %+v, want %s PreviouslyAccepted", sr2, sr.InvocationID)
	}
	if got := rec.count(sr.InvocationID); got != 1 {
		t.Errorf("service saw the idempotent invocation %d times, want 1", got)
	}
}

// TestKillNineAndRestart kills a node with SIGKILL while clients send,
// restarts it from its data dir, and checks that nothing acknowledged was
// lost and the node serves again.
func TestKillNineAndRestart(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3})
	rec := newRecorder(t)
	c.registerService(c.nodes[0], "Echo", rec.srv.URL)
	h := newHistory()
	stop := make(chan struct{})
	wait := runLoad(t, c, h, "Echo", 8, stop)

	acked := func(n int) func() bool {
		return func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.acks) >= n }
	}
	testutil.WaitFor(t, 20*time.Second, "first acknowledgements", acked(50))
	victim := c.nodes[0]
	c.kill(victim)
	testutil.WaitFor(t, 20*time.Second, "acknowledgements while a node is down", acked(150))
	c.restart(victim)
	testutil.WaitFor(t, 20*time.Second, "acknowledgements after restart", acked(250))
	close(stop)
	wait()
	checkEveryAckHasItsResult(t, c, h, rec)

	// The restarted node serves a call itself.
	r, err := do(context.Background(), http.MethodPost, victim.ingressURL()+"/Echo/echo", []byte(`"back"`), nil)
	if err != nil || r.status != http.StatusOK || string(r.body) != `"back"` {
		t.Fatalf("call through the restarted node: %v %+v", err, r)
	}
}

// TestRollingRestartUnderLoad stops each node in turn with SIGTERM while
// clients send, restarts it, and checks that clients saw only successes or
// retry-safe errors and that every acknowledged invocation has its result.
func TestRollingRestartUnderLoad(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3})
	rec := newRecorder(t)
	c.registerService(c.nodes[0], "Echo", rec.srv.URL)
	h := newHistory()
	stop := make(chan struct{})
	wait := runLoad(t, c, h, "Echo", 8, stop)
	count := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.acks) }

	for _, n := range c.nodes {
		before := count()
		testutil.WaitFor(t, 20*time.Second, "progress before the restart", func() bool { return count() >= before+30 })
		c.terminate(n, 20*time.Second)
		t.Logf("node %d stopped; %d acknowledged so far", n.id, count())
		before = count()
		testutil.WaitFor(t, 20*time.Second, "progress while a node is stopped", func() bool { return count() >= before+30 })
		c.restart(n)
	}
	close(stop)
	wait()
	checkEveryAckHasItsResult(t, c, h, rec)
}
