package ingress

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/rpc"
)

// callingDispatcher is a fakeDispatcher that also serves Caller, as the
// dispatch client does: an append and the wait for the result in one
// request. lose makes it answer without the result, as a leader that lost
// leadership mid-wait (or a node of an older release) does.
type callingDispatcher struct {
	*fakeDispatcher
	lose     bool
	calls    atomic.Int64
	attaches atomic.Int64
}

func (d *callingDispatcher) Call(ctx context.Context, part uint32, inv *rpc.Invoke, _ time.Duration) (*rpc.Appended, error) {
	d.calls.Add(1)
	a, err := d.fakeDispatcher.Append(ctx, part, inv)
	if err != nil || d.lose {
		return a, err
	}
	if res, err := d.fakeDispatcher.Attach(ctx, part, inv.InvocationId); err == nil {
		a.Result = res
	}
	return a, nil
}

func (d *callingDispatcher) Attach(ctx context.Context, part uint32, id []byte) (*rpc.InvocationResult, error) {
	d.attaches.Add(1)
	return d.fakeDispatcher.Attach(ctx, part, id)
}

func newCallingHandler(t *testing.T, lose bool, mutate func(*Config)) (*Handler, *callingDispatcher) {
	var cd *callingDispatcher
	h, _ := newTestHandler(t, func(c *Config) {
		cd = &callingDispatcher{fakeDispatcher: c.Dispatcher.(*fakeDispatcher), lose: lose}
		c.Dispatcher = cd
		if mutate != nil {
			mutate(c)
		}
	})
	return h, cd
}

// A call through a Caller is one request: no Attach.
func TestCallerCallIsOneRequest(t *testing.T) {
	h, cd := newCallingHandler(t, false, nil)
	cd.complete = echoResult
	w := do(h, "POST", "/Greeter/greet", `"hi"`, "Content-Type", "application/json")
	if w.Code != 200 || w.Body.String() != `"hi"` {
		t.Fatalf("call = %d %q", w.Code, w.Body)
	}
	if calls, attaches, appends := cd.calls.Load(), cd.attaches.Load(), cd.appendCount(); calls != 1 || attaches != 0 || appends != 1 {
		t.Fatalf("%d calls, %d attaches, %d appends; want one call", calls, attaches, appends)
	}
}

// An answer without the result (leader lost mid-wait, or an older node)
// falls back to an Attach by id, which answers the result once.
func TestCallerWithoutResultFallsBackToAttach(t *testing.T) {
	h, cd := newCallingHandler(t, true, nil)
	cd.complete = echoResult
	w := do(h, "POST", "/Greeter/greet", `"hi"`, "Content-Type", "application/json")
	if w.Code != 200 || w.Body.String() != `"hi"` {
		t.Fatalf("call = %d %q", w.Code, w.Body)
	}
	if calls, attaches, appends := cd.calls.Load(), cd.attaches.Load(), cd.appendCount(); calls != 1 || attaches != 1 || appends != 1 {
		t.Fatalf("%d calls, %d attaches, %d appends; want a call, then one attach", calls, attaches, appends)
	}
}

// A call whose wait times out after the append answers 470 with the id
// (the invocation keeps running), not an append failure; a workflow's run
// still appends and attaches apart (a second run answers 409 at once).
func TestCallerTimeoutAndWorkflowRun(t *testing.T) {
	h, cd := newCallingHandler(t, false, func(c *Config) {
		c.Services.(fakeServices)["Flow"] = &rpc.Service{Name: "Flow", Url: "http://127.0.0.1:1", Kind: rpc.Service_WORKFLOW}
	})
	w := do(h, "POST", "/Greeter/greet?timeout=20ms", "")
	msg := decodeError(t, w, 470, "ingress")
	if id := mustID(t, w); cd.appendCount() != 1 || id.String() == "" || msg == "" {
		t.Fatalf("timeout answer %q after %d appends", msg, cd.appendCount())
	}
	cd.complete = echoResult
	if w := do(h, "POST", "/Flow/f1/run", `"a"`, "Content-Type", "application/json"); w.Code != 200 {
		t.Fatalf("run = %d %q", w.Code, w.Body)
	}
	decodeError(t, do(h, "POST", "/Flow/f1/run", `"a"`, "Content-Type", "application/json"), 409, "ingress")
	if calls := cd.calls.Load(); calls != 1 {
		t.Fatalf("%d calls: a workflow's run must not wait at the leader", calls)
	}
}
