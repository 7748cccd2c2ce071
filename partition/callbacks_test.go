package partition

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/raftgate/raftgate/callback"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

func callbackAttemptCmd(c *rpc.CallbackAttempt) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_CallbackAttempt{CallbackAttempt: c}}
}

// queuedCallbacks reads a replica's callback queue.
func queuedCallbacks(t *testing.T, r *replica) []outbox.Entry {
	t.Helper()
	var got []outbox.Entry
	if err := r.View(context.Background(), func(b *bolt.Bucket) error {
		return outbox.ScanCallbacks(b, func(e outbox.Entry) bool { got = append(got, e); return true })
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func readRecord(t *testing.T, r *replica, id []byte) (*rpc.InvocationRecord, *rpc.InvocationResult) {
	t.Helper()
	var rec *rpc.InvocationRecord
	var res *rpc.InvocationResult
	if err := r.View(context.Background(), func(b *bolt.Bucket) error {
		var err error
		rec, res, err = readInvocation(b, id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return rec, res
}

// The callback is queued by the Apply that completes the invocation (a
// Complete or a Cancel), due at the completion, and leaves the queue only
// through CallbackAttempt entries: stale reports change nothing, a retry
// moves it, a delivery or a give-up removes it; the result never changes.
// Replicas applying the log in other chunks store the same bytes.
func TestCallbackQueuedByApplyRemovedThroughLog(t *testing.T) {
	var entries []raftlog.Entry
	add := func(cmds ...*rpc.Command) {
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: 1, Data: data})
	}
	const url = "http://127.0.0.1:9/cb"
	withCB, plain, cancelled, purged := newInvoke("svc", 1), newInvoke("svc", 2), newInvoke("svc", 3), newInvoke("svc", 4)
	for i, inv := range []*rpc.Invoke{withCB, plain, cancelled, purged} {
		inv.ProposedAtUnixMs = int64(1000 + i)
		if inv != plain {
			inv.CallbackUrl = url
		}
		add(invokeCmd(inv))
	}
	if got := queuedCallbacks(t, applyAll(t, entries, 1)); len(got) != 0 {
		t.Fatalf("callbacks queued before completion: %v", got)
	}
	done := &rpc.Result{Status: 200, Body: []byte(`{"ok":true}`)}
	add(completeCmd(&rpc.Complete{InvocationId: withCB.InvocationId, Result: done, ProposedAtUnixMs: 2000}))
	add(completeCmd(&rpc.Complete{InvocationId: plain.InvocationId, Result: done, ProposedAtUnixMs: 2001}))
	add(cancelCmd(&rpc.Cancel{InvocationId: cancelled.InvocationId, RequestId: []byte("c"), ProposedAtUnixMs: 2002}))
	add(completeCmd(&rpc.Complete{InvocationId: purged.InvocationId, Result: done, ProposedAtUnixMs: 100}))

	r := applyAll(t, entries, 1)
	got := queuedCallbacks(t, r)
	if len(got) != 3 || string(got[0].ID) != string(purged.InvocationId) || got[0].Due != 100 ||
		string(got[1].ID) != string(withCB.InvocationId) || got[1].Due != 2000 || string(got[2].ID) != string(cancelled.InvocationId) || got[2].Due != 2002 {
		t.Fatalf("after completion, queue = %+v", got)
	}
	if rec, _ := readRecord(t, r, withCB.InvocationId); rec.GetCallback().GetState() != rpc.CallbackState_PENDING {
		t.Fatalf("callback state %v, want PENDING", rec.GetCallback())
	}
	if rec, _ := readRecord(t, r, plain.InvocationId); rec.GetCallback() != nil {
		t.Fatalf("callback state %v without a URL", rec.GetCallback())
	}
	_, resBefore := readRecord(t, r, withCB.InvocationId)

	id := withCB.InvocationId
	add(callbackAttemptCmd(&rpc.CallbackAttempt{InvocationId: id, Attempt: 0, Delivered: true})) // not above the recorded 0: stale
	add(callbackAttemptCmd(&rpc.CallbackAttempt{InvocationId: id, Attempt: 1, Error: "answered 503", RetryAtUnixMs: 5000}))
	add(callbackAttemptCmd(&rpc.CallbackAttempt{InvocationId: id, Attempt: 1, Delivered: true})) // an old leader's attempt 1
	add(callbackAttemptCmd(&rpc.CallbackAttempt{InvocationId: cancelled.InvocationId, Attempt: 1, GaveUp: true, Error: "answered 404"}))
	add(purgeCmd(&rpc.Purge{BeforeUnixMs: 1000}))
	r = applyAll(t, entries, 1)
	got = queuedCallbacks(t, r)
	if len(got) != 2 || string(got[0].ID) != string(purged.InvocationId) || string(got[1].ID) != string(id) || got[1].Due != 5000 || got[1].Attempts != 1 {
		t.Fatalf("after a retry and a give-up, queue = %+v", got)
	}
	rec, res := readRecord(t, r, id)
	if cb := rec.GetCallback(); cb.GetState() != rpc.CallbackState_PENDING || cb.Attempts != 1 || cb.LastError != "answered 503" || cb.RetryAtUnixMs != 5000 {
		t.Fatalf("after a retry, callback %v", cb)
	}
	if rec, _ := readRecord(t, r, cancelled.InvocationId); rec.GetCallback().GetState() != rpc.CallbackState_FAILED || rec.GetCallback().LastError != "answered 404" {
		t.Fatalf("after a give-up, callback %v", rec.GetCallback())
	}
	if rec, _ := readRecord(t, r, purged.InvocationId); rec != nil {
		t.Fatal("purge kept the record")
	}

	add(callbackAttemptCmd(&rpc.CallbackAttempt{InvocationId: id, Attempt: 2, Delivered: true}))
	add(callbackAttemptCmd(&rpc.CallbackAttempt{InvocationId: purged.InvocationId, Attempt: 1, GaveUp: true, DueUnixMs: 100}))
	r = applyAll(t, entries, 1)
	if got := queuedCallbacks(t, r); len(got) != 0 {
		t.Fatalf("after delivery, queue = %+v", got)
	}
	rec, res2 := readRecord(t, r, id)
	if cb := rec.GetCallback(); cb.GetState() != rpc.CallbackState_DELIVERED || cb.Attempts != 2 || cb.RetryAtUnixMs != 0 {
		t.Fatalf("after delivery, callback %v", cb)
	}
	for _, r := range []*rpc.InvocationResult{res, res2} {
		if string(r.GetResult().GetBody()) != string(resBefore.GetResult().GetBody()) || r.GetCompletedAtUnixMs() != resBefore.GetCompletedAtUnixMs() {
			t.Fatalf("the callback changed the result: %v, was %v", r, resBefore)
		}
	}
	if a, b := applyAll(t, entries, 1).dump(t), applyAll(t, entries, 4).dump(t); a != b {
		t.Fatal("replicas applying the same log in other chunks differ")
	}
}

// callbackReceiver records callback POSTs, checks their signatures and
// answers with answer (default 200).
type callbackReceiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret []byte

	mu       sync.Mutex
	posts    map[string]int // by x-raftgate-callback-id
	payloads map[string]callback.Payload
	badSig   int
	answer   func(id string, n int) int
}

func newCallbackReceiver(t *testing.T, secret []byte) *callbackReceiver {
	cr := &callbackReceiver{t: t, secret: secret, posts: map[string]int{}, payloads: map[string]callback.Payload{}}
	cr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get(callback.HeaderID)
		var p callback.Payload
		err := json.Unmarshal(body, &p)
		cr.mu.Lock()
		if !callback.Verify(cr.secret, body, r.Header.Get(callback.HeaderSignature)) || err != nil || p.InvocationID != id {
			cr.badSig++
		}
		cr.posts[id]++
		cr.payloads[id] = p
		n, answer := cr.posts[id], cr.answer
		cr.mu.Unlock()
		status := http.StatusOK
		if answer != nil {
			status = answer(id, n)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(cr.srv.Close)
	return cr
}

func (cr *callbackReceiver) seen(id string) (int, callback.Payload) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return cr.posts[id], cr.payloads[id]
}

func callbackConfig(t *testing.T, cfg *Config, cr *callbackReceiver, attempts uint32) {
	allow, err := callback.ParseAllow([]string{cr.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Callbacks.Allow = allow
	cfg.Callbacks.Secret = cr.secret
	cfg.Callbacks.Retry = outbox.Policy{MaxAttempts: attempts, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, AttemptTimeout: 5 * time.Second}
}

// Callbacks reach the receiver signed, with the result; a receiver that
// fails at first is retried; a leader change while POSTs are under way
// repeats them on the new leader (at-least-once); an attach is answered
// while the callback is still failing; every replica ends DELIVERED.
func TestCallbackDeliveredAcrossLeaderChange(t *testing.T) {
	svc := newRecordingService(t)
	cr := newCallbackReceiver(t, []byte("k"))
	block := make(chan struct{})
	var once sync.Once
	started := make(chan struct{})
	cr.answer = func(id string, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		once.Do(func() { close(started) })
		<-block // later attempts hang until the leader changed
		return http.StatusOK
	}
	c := newFakeCluster(t, 3, func(_ int, cfg *Config) {
		cfg.Services = svc.lookup("svc")
		callbackConfig(t, cfg, cr, 10)
	})
	c.setLeader(0, false)
	var ids []invocation.ID
	want := map[invocation.ID]string{}
	for i := range 5 {
		inv := newInvoke("svc", i)
		inv.CallbackUrl = cr.srv.URL + "/done"
		if _, err := c.replicas[0].p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		id, _ := invocation.IDFromBytes(inv.InvocationId)
		ids = append(ids, id)
		want[id] = `"echo:` + string(inv.Body) + `"`
	}
	for _, id := range ids {
		// The result is there, whatever the callback does.
		if res := awaitOutput(t, c.replicas[0].p, id.Bytes()); res.GetResult().GetStatus() != 200 {
			t.Fatalf("result %v", res)
		}
	}
	<-started
	c.setLeader(1, true)
	close(block)
	for _, id := range ids {
		waitUntil(t, "callback delivered", func() bool {
			rec, _ := readRecord(t, c.replicas[1], id.Bytes())
			return rec.GetCallback().GetState() == rpc.CallbackState_DELIVERED
		})
		n, p := cr.seen(id.String())
		if n < 2 || p.Status != "succeeded" || p.Code != 200 || string(p.Result) != want[id] {
			t.Fatalf("%s: %d posts, payload %+v", id, n, p)
		}
	}
	cr.mu.Lock()
	if cr.badSig != 0 {
		t.Fatalf("%d posts with a bad signature or payload", cr.badSig)
	}
	cr.mu.Unlock()
	c.waitApplied()
	if a, b := c.replicas[0].dump(t), c.replicas[2].dump(t); a != b {
		t.Fatal("replicas differ")
	}
	if got := queuedCallbacks(t, c.replicas[2]); len(got) != 0 {
		t.Fatalf("callbacks left queued: %v", got)
	}
}

// A callback that keeps failing gives up after its attempts, visibly (the
// record's callback state, the metric), and the result stays as it was. A
// URL the allow-list does not (or no longer) allow is never called.
func TestCallbackGivesUpVisibly(t *testing.T) {
	svc := newRecordingService(t)
	cr := newCallbackReceiver(t, []byte("k"))
	cr.answer = func(string, int) int { return http.StatusInternalServerError }
	reg := prometheus.NewRegistry()
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = svc.lookup("svc")
		cfg.Registerer = reg
		callbackConfig(t, cfg, cr, 3)
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	failing, elsewhere := newInvoke("svc", 1), newInvoke("svc", 2)
	failing.CallbackUrl = cr.srv.URL
	elsewhere.CallbackUrl = "http://127.0.0.2:1/not-allowed"
	for _, inv := range []*rpc.Invoke{failing, elsewhere} {
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
	}
	for _, inv := range []*rpc.Invoke{failing, elsewhere} {
		waitUntil(t, "callback failed", func() bool {
			rec, _ := readRecord(t, c.replicas[0], inv.InvocationId)
			return rec.GetCallback().GetState() == rpc.CallbackState_FAILED
		})
	}
	rec, res := readRecord(t, c.replicas[0], failing.InvocationId)
	if cb := rec.GetCallback(); cb.Attempts != 3 || cb.LastError != "callback URL answered 500" {
		t.Fatalf("callback %v", cb)
	}
	if res.GetResult().GetStatus() != 200 || res.GetResult().GetFailed() {
		t.Fatalf("result changed: %v", res)
	}
	id, _ := invocation.IDFromBytes(failing.InvocationId)
	if n, _ := cr.seen(id.String()); n != 3 {
		t.Fatalf("%d posts, want 3", n)
	}
	rec, _ = readRecord(t, c.replicas[0], elsewhere.InvocationId)
	if cb := rec.GetCallback(); cb.Attempts != 1 || cb.LastError == "" {
		t.Fatalf("callback to a URL not allowed: %v", cb)
	}
	c.waitApplied()
	if got := testutil.ToFloat64(p.metrics.callbackAttempts[callbackFailed]); got != 2 {
		t.Fatalf("failed callbacks metric %v, want 2", got)
	}
	if got := testutil.ToFloat64(p.metrics.callbackAttempts[callbackRetry]); got != 2 {
		t.Fatalf("retried callbacks metric %v, want 2", got)
	}
}
