package partition

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// callResult is one Call's outcome.
type callResult struct {
	a   *rpc.Appended
	err error
}

func goCall(t *testing.T, p *Processor, inv *rpc.Invoke) <-chan callResult {
	out := make(chan callResult, 1)
	ctx := context.WithValue(ctxT(t), countedRead{}, true)
	go func() {
		a, err := p.Call(ctx, inv)
		out <- callResult{a, err}
	}()
	return out
}

// A call answers the result it waited for, with no ReadIndex round: the
// waiter was registered before the append.
func TestCallAnswersResult(t *testing.T) {
	svc := newRecordingService(t)
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) { cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	svc.block = make(chan struct{})
	r := c.replicas[0]
	inv := newInvoke("greeter", 1)
	done := goCall(t, r.p, inv)
	id, _ := invocation.IDFromBytes(inv.InvocationId)
	testutil.WaitFor(t, 5*time.Second, "delivery", func() bool { return svc.count(id) == 1 })
	close(svc.block)
	got := <-done
	if got.err != nil || got.a.PreviouslyAccepted || got.a.GetResult() == nil {
		t.Fatalf("call = %v, %v; want the appended invocation with its result", got.a, got.err)
	}
	if res := got.a.Result; !bytes.Equal(res.InvocationId, inv.InvocationId) || string(res.Result.Body) != "echo:hello 1" {
		t.Fatalf("result = %v", res)
	}
	if n := r.reads.Load(); n != 0 {
		t.Fatalf("a call made %d ReadIndex rounds, want 0", n)
	}
	if n := r.p.attach.Len(); n != 0 {
		t.Fatalf("%d attach waiters left", n)
	}
}

// A resubmit of an invocation that completed before answers its stored
// result at once: from another request (an idempotent resubmit) and as a
// retry of the request that created it.
func TestCallCompletedBeforeResubmit(t *testing.T) {
	svc := newRecordingService(t)
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) { cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	p := c.replicas[0].p
	inv := newInvoke("greeter", 1)
	inv.IdempotencyKey = "k"
	first := <-goCall(t, p, inv)
	if first.err != nil || first.a.GetResult() == nil {
		t.Fatalf("first call = %v, %v", first.a, first.err)
	}
	again := newInvoke("greeter", 2)
	again.InvocationId, again.IdempotencyKey = inv.InvocationId, "k"
	retry := proto.Clone(inv).(*rpc.Invoke)
	reads := c.replicas[0].reads.Load()
	for _, tc := range []struct {
		name     string
		inv      *rpc.Invoke
		previous bool
	}{{"resubmit", again, true}, {"retry", retry, false}} {
		got := <-goCall(t, p, tc.inv)
		if got.err != nil || got.a.PreviouslyAccepted != tc.previous || got.a.CompletedAtUnixMs == 0 {
			t.Fatalf("%s = %v, %v", tc.name, got.a, got.err)
		}
		if res := got.a.GetResult(); res == nil || string(res.Result.Body) != "echo:hello 1" || res.IdempotencyKey != "k" {
			t.Fatalf("%s result = %v, want the stored one", tc.name, res)
		}
	}
	// Only a resubmit of a completed invocation reads at a ReadIndex.
	if n := c.replicas[0].reads.Load() - reads; n != 2 {
		t.Fatalf("%d ReadIndex rounds for two resubmits, want 2", n)
	}
	id, _ := invocation.IDFromBytes(inv.InvocationId)
	if n := svc.count(id); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
}

// When leadership moves while a call waits, the call answers the appended
// invocation without a result (so the caller attaches by id, at the new
// leader), and that attach gets the result.
func TestCallLeaderChangeMidWait(t *testing.T) {
	svc := newRecordingService(t)
	c := newFakeCluster(t, 3, func(_ int, cfg *Config) { cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	svc.block = make(chan struct{})
	inv := newInvoke("greeter", 1)
	done := goCall(t, c.replicas[0].p, inv)
	id, _ := invocation.IDFromBytes(inv.InvocationId)
	testutil.WaitFor(t, 5*time.Second, "delivery", func() bool { return svc.count(id) >= 1 })
	c.setLeader(1, true)
	got := <-done
	if got.err != nil || got.a.GetResult() != nil || !bytes.Equal(got.a.GetInvocationId(), inv.InvocationId) {
		t.Fatalf("call across a leader change = %v, %v; want the appended invocation without result", got.a, got.err)
	}
	attached := make(chan callResult, 1)
	go func() {
		res, err := c.replicas[1].p.Attach(ctxT(t), inv.InvocationId)
		attached <- callResult{&rpc.Appended{Result: res}, err}
	}()
	close(svc.block)
	a := <-attached
	if a.err != nil || string(a.a.Result.GetResult().GetBody()) != "echo:hello 1" {
		t.Fatalf("attach at the new leader = %v, %v", a.a, a.err)
	}
}
