package partition

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

func TestPurgeRemovesExactlyExpiredOnEveryReplica(t *testing.T) {
	clock := newManualClock()
	svc := newRecordingService(t)
	c := newFakeCluster(t, 3, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = svc.lookup("greeter")
		cfg.Retention = time.Hour
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	var old, fresh []*rpc.Invoke
	for i := range 3 {
		inv := newInvoke("greeter", i)
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		awaitOutput(t, p, inv.InvocationId)
		old = append(old, inv)
	}
	clock.Advance(30 * time.Minute)
	for i := range 2 {
		inv := newInvoke("greeter", 10+i)
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		awaitOutput(t, p, inv.InvocationId)
		fresh = append(fresh, inv)
	}
	// 45 minutes later the first three are 75 minutes old, the others 45.
	clock.Advance(45 * time.Minute)
	if proposed, err := p.sweepOnce(ctxT(t), p.retentionClock(context.Background(), 1)); err != nil || !proposed {
		t.Fatal("sweep proposed nothing", err)
	}
	testutil.WaitFor(t, 5*time.Second, "purge applied", func() bool {
		_, err := p.Output(ctxT(t), old[0].InvocationId)
		return errors.Is(err, rpc.ErrNotFound)
	})
	c.waitApplied()
	for _, r := range c.replicas {
		for _, inv := range old {
			if err := r.View(context.Background(), func(b *bolt.Bucket) error {
				if _, found, _ := getRecord(b, inv.InvocationId); found {
					t.Errorf("replica %d kept expired record", r.n)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		for _, inv := range fresh {
			if _, err := r.p.readResult(context.Background(), inv.InvocationId); err != nil {
				t.Errorf("replica %d lost a live result: %v", r.n, err)
			}
		}
	}
	if d0, d2 := c.replicas[0].dump(t), c.replicas[2].dump(t); d0 != d2 {
		t.Fatalf("replicas differ after purge")
	}
	// A purged id can be invoked afresh.
	a, err := p.Append(ctxT(t), old[0])
	if err != nil || a.PreviouslyAccepted {
		t.Fatalf("re-append after purge = %v, %v", a, err)
	}
	// Nothing expired: the sweep proposes nothing.
	awaitOutput(t, p, old[0].InvocationId)
	if proposed, err := p.sweepOnce(ctxT(t), p.retentionClock(context.Background(), 1)); err != nil || proposed {
		t.Fatalf("sweep with nothing expired proposed %v, %v", proposed, err)
	}
}

func TestCancel(t *testing.T) {
	clock := newManualClock()
	svc := newRecordingService(t)
	c := newFakeCluster(t, 2, func(_ int, cfg *Config) { cfg.Clock = clock.Now; cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	p := c.replicas[0].p
	inv := newInvoke("greeter", 1)
	inv.NotBeforeUnixMs = clock.Now().Add(time.Hour).UnixMilli()
	if _, err := p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	attached := make(chan *rpc.InvocationResult, 1)
	go func() {
		res, err := p.Attach(ctxT(t), inv.InvocationId)
		if err != nil {
			t.Errorf("attach: %v", err)
		}
		attached <- res
	}()
	if err := p.Cancel(ctxT(t), invocation.NewRequestID(), inv.InvocationId); err != nil {
		t.Fatal(err)
	}
	res := <-attached
	if r := res.Result; r.Status != cancelledStatus || !r.Failed || r.Error != cancelledError {
		t.Fatalf("cancelled result = %v", r)
	}
	// Cancelling again does nothing; an unknown id is not found.
	if err := p.Cancel(ctxT(t), invocation.NewRequestID(), inv.InvocationId); err != nil {
		t.Fatalf("second cancel = %v", err)
	}
	if err := p.Cancel(ctxT(t), invocation.NewRequestID(), invocation.Random().Bytes()); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("cancel unknown = %v", err)
	}
	clock.Advance(2 * time.Hour)
	c.waitApplied()
	for _, r := range c.replicas {
		if r.p.OutboxDepth() != 0 {
			t.Fatalf("replica %d outbox depth %d", r.n, r.p.OutboxDepth())
		}
	}
	if ids, _ := svc.total(); ids != 0 {
		t.Fatalf("cancelled invocation was delivered")
	}
}

func TestDelayedSend(t *testing.T) {
	clock := newManualClock()
	svc := newRecordingService(t)
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) { cfg.Clock = clock.Now; cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	p := c.replicas[0].p
	delayed, now := newInvoke("greeter", 1), newInvoke("greeter", 2)
	delayed.NotBeforeUnixMs = clock.Now().Add(10 * time.Second).UnixMilli()
	a, err := p.Append(ctxT(t), delayed)
	if err != nil || a.NotBeforeUnixMs != delayed.NotBeforeUnixMs {
		t.Fatalf("append delayed = %v, %v", a, err)
	}
	if _, err := p.Append(ctxT(t), now); err != nil {
		t.Fatal(err)
	}
	// The immediate one runs; the delayed one waits for its time.
	awaitOutput(t, p, now.InvocationId)
	if _, err := p.Output(ctxT(t), delayed.InvocationId); !errors.Is(err, rpc.ErrNotReady) {
		t.Fatalf("delayed output before its time = %v", err)
	}
	id, _ := invocation.IDFromBytes(delayed.InvocationId)
	if svc.count(id) != 0 {
		t.Fatal("delayed invocation ran early")
	}
	clock.Advance(10 * time.Second)
	res := awaitOutput(t, p, delayed.InvocationId)
	if res.Result.Status != 200 || res.CompletedAtUnixMs < delayed.NotBeforeUnixMs {
		t.Fatalf("delayed result = %v", res)
	}
}

// A leader crashes after the service answered and before its Complete is
// in the log: the next leader delivers again and the result is recorded
// once. The old leader's late Complete (uncommitted, then committed by the
// new leader) must not overwrite the first result either.
func TestOutboxSurvivesLeaderCrashBeforeComplete(t *testing.T) {
	svc := newRecordingService(t)
	svc.answer = func(id string, attempt int, body []byte) (int, http.Header, []byte) {
		return 200, nil, []byte("answer " + strings.Repeat("!", attempt))
	}
	c := newFakeCluster(t, 3, func(i int, cfg *Config) {
		cfg.Services = svc.lookup("greeter")
		if i == 0 {
			cfg.Knobs.AfterServiceAnswer = func([]byte, uint32) bool { return false } // crash
		}
	})
	c.setLeader(0, false)
	inv := newInvoke("greeter", 1)
	if _, err := c.replicas[0].p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	id, _ := invocation.IDFromBytes(inv.InvocationId)
	testutil.WaitFor(t, 5*time.Second, "first delivery", func() bool { return svc.count(id) == 1 })
	c.mu.Lock()
	c.replicas[0].down = true
	c.mu.Unlock()
	c.setLeader(1, false)
	res := awaitOutput(t, c.replicas[1].p, inv.InvocationId)
	if svc.count(id) != 2 {
		t.Fatalf("deliveries = %d, want 2 (at-least-once across the crash)", svc.count(id))
	}
	// Replay the stale leader's Complete after the fact: a no-op.
	stale, err := rpc.EncodeBatch(completeCmd(&rpc.Complete{InvocationId: inv.InvocationId, Result: &rpc.Result{Status: 200, Body: []byte("stale")}}))
	if err != nil {
		t.Fatal(err)
	}
	c.appendRaw(stale)
	c.waitApplied()
	again := awaitOutput(t, c.replicas[2].p.withLeaderCheck(t, c, 2), inv.InvocationId)
	if string(again.Result.Body) != string(res.Result.Body) || again.CompletedAtUnixMs != res.CompletedAtUnixMs {
		t.Fatalf("result changed: %v then %v", res, again)
	}
	if d1, d2 := c.replicas[1].dump(t), c.replicas[2].dump(t); d1 != d2 {
		t.Fatal("live replicas differ")
	}
}

// withLeaderCheck makes replica n the leader and returns its processor.
func (p *Processor) withLeaderCheck(t *testing.T, c *fakeCluster, n int) *Processor {
	t.Helper()
	c.setLeader(n, true)
	return p
}

// TestCancelRunningCountsTheDelivery (issue 15, item 11): cancelling an
// invocation while it is being delivered counts that delivery in the
// result's attempts (the proposer says so in the Cancel entry, so every
// replica records the same); a queued one counts none.
func TestCancelRunningCountsTheDelivery(t *testing.T) {
	svc := newRecordingService(t)
	svc.block = make(chan struct{}) // the service never answers
	t.Cleanup(func() { close(svc.block) })
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) { cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	p := c.replicas[0].p
	running, queued := newInvoke("greeter", 1), newInvoke("greeter", 2)
	queued.NotBeforeUnixMs = time.Now().Add(time.Hour).UnixMilli()
	for _, inv := range []*rpc.Invoke{running, queued} {
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := invocation.IDFromBytes(running.InvocationId)
	testutil.WaitFor(t, 5*time.Second, "the delivery under way", func() bool { return svc.count(id) == 1 })
	for inv, want := range map[*rpc.Invoke]uint32{running: 1, queued: 0} {
		if err := p.Cancel(ctxT(t), invocation.NewRequestID(), inv.InvocationId); err != nil {
			t.Fatal(err)
		}
		res := awaitOutput(t, p, inv.InvocationId).Result
		if res.Status != cancelledStatus || res.Attempts != want {
			t.Errorf("cancelled result %v, want %d attempts", res, want)
		}
	}
}
