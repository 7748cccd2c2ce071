package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// awaitOutput polls Output on the leader until the result exists.
func awaitOutput(t *testing.T, p *Processor, id []byte) *rpc.InvocationResult {
	t.Helper()
	var res *rpc.InvocationResult
	testutil.WaitFor(t, 10*time.Second, "result", func() bool {
		r, err := p.Output(ctxT(t), id)
		if errors.Is(err, rpc.ErrNotReady) {
			return false
		}
		if err != nil {
			t.Fatalf("output: %v", err)
		}
		res = r
		return true
	})
	return res
}

func TestFollowerAnswersNotLeader(t *testing.T) {
	c := newFakeCluster(t, 2, nil)
	c.setLeader(0, false)
	_, err := c.replicas[1].p.Append(ctxT(t), newInvoke("greeter", 1))
	var nl *rpc.NotLeaderError
	if term := c.rc.Group(0).Status().Term; !errors.As(err, &nl) || nl.Leader != 1 || nl.Term != term {
		t.Fatalf("follower append = %v, want NotLeaderError{1, %d}", err, term)
	}
	if _, err := c.replicas[1].p.Output(ctxT(t), invocation.Random().Bytes()); !errors.As(err, &nl) {
		t.Fatalf("follower output = %v", err)
	}
	if _, err := c.replicas[0].p.Append(ctxT(t), &rpc.Invoke{InvocationId: []byte("short")}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("malformed append = %v", err)
	}
	// Not started yet, although told it leads: nothing is served.
	p, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.OnLeadership(raftlog.LeaderEvent{Group: 1, Leader: 1, Term: 1, IsSelf: true})
	for _, call := range []func() error{
		func() error { _, err := p.Output(ctxT(t), invocation.Random().Bytes()); return err },
		func() error { _, err := p.Attach(ctxT(t), invocation.Random().Bytes()); return err },
		func() error { _, err := p.Append(ctxT(t), newInvoke("greeter", 1)); return err },
	} {
		if err := call(); !errors.As(err, &nl) {
			t.Fatalf("before Start: %v, want NotLeaderError", err)
		}
	}
}

// parked makes deliveries wait forever (a registry that cannot tell,
// hour-long backoff), for tests of the request path alone.
func parked(_ int, cfg *Config) {
	cfg.Services = &switchableServices{}
	cfg.Invoker.Retry.BackoffBase = time.Hour
	cfg.Invoker.Retry.BackoffMax = time.Hour
}

func TestDedupAcrossLeaderChange(t *testing.T) {
	c := newFakeCluster(t, 3, parked)
	c.setLeader(0, false)
	inv := newInvoke("greeter", 1)
	a, err := c.replicas[0].p.Append(ctxT(t), inv)
	if err != nil || a.PreviouslyAccepted || !bytes.Equal(a.InvocationId, inv.InvocationId) {
		t.Fatalf("first append = %v, %v", a, err)
	}
	c.setLeader(1, true)
	// Same request retried at the new leader: the same logical request.
	a, err = c.replicas[1].p.Append(ctxT(t), inv)
	if err != nil || a.PreviouslyAccepted {
		t.Fatalf("retried append = %v, %v", a, err)
	}
	// Another request with the same id (same idempotency key).
	other := newInvoke("greeter", 2)
	other.InvocationId = inv.InvocationId
	a, err = c.replicas[1].p.Append(ctxT(t), other)
	if err != nil || !a.PreviouslyAccepted {
		t.Fatalf("duplicate append = %v, %v", a, err)
	}
	c.waitApplied()
	for _, r := range c.replicas {
		if d := r.p.OutboxDepth(); d != 1 {
			t.Fatalf("replica %d outbox depth %d, want 1", r.n, d)
		}
	}
	// The stored invocation is the first one.
	rec, err := c.replicas[1].p.Status(ctxT(t), inv.InvocationId)
	if err != nil || string(rec.Invoke.Body) != "hello 1" {
		t.Fatalf("status = %v, %v", rec, err)
	}
}

func TestPendingFailOnStepDownRetryGetsOriginal(t *testing.T) {
	c := newFakeCluster(t, 3, parked)
	c.setLeader(0, false)
	// An applied, running invocation to attach to.
	running := newInvoke("greeter", 0)
	if _, err := c.replicas[0].p.Append(ctxT(t), running); err != nil {
		t.Fatal(err)
	}
	attach := make(chan error, 1)
	go func() {
		_, err := c.replicas[0].p.Attach(ctxT(t), running.InvocationId)
		attach <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "attach waiting", func() bool { return c.replicas[0].p.attach.Len() == 1 })

	c.setHold(true)
	inv := newInvoke("greeter", 1)
	errc := make(chan error, 1)
	go func() {
		_, err := c.replicas[0].p.Append(ctxT(t), inv)
		errc <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "entry appended", func() bool { return c.countInvokes(t) == 2 })
	// The new leader had the entry: it commits under it.
	c.setLeader(1, true)
	if err := <-errc; !errors.Is(err, rpc.ErrLostLeadership) {
		t.Fatalf("pending append on step-down = %v, want ErrLostLeadership", err)
	}
	if err := <-attach; !errors.Is(err, rpc.ErrLostLeadership) {
		t.Fatalf("attach on step-down = %v, want ErrLostLeadership", err)
	}
	c.setHold(false)
	a, err := c.replicas[1].p.Append(ctxT(t), inv)
	if err != nil || a.PreviouslyAccepted || !bytes.Equal(a.InvocationId, inv.InvocationId) {
		t.Fatalf("retry at new leader = %v, %v", a, err)
	}
	c.waitApplied()
	if d := c.replicas[2].p.OutboxDepth(); d != 2 {
		t.Fatalf("outbox depth %d, want 2 (no duplicate invocation)", d)
	}
}

func TestRetryWhilePendingTakesOverReply(t *testing.T) {
	c := newFakeCluster(t, 1, nil)
	c.setLeader(0, false)
	c.setHold(true)
	inv := newInvoke("greeter", 1)
	first := make(chan error, 1)
	go func() {
		_, err := c.replicas[0].p.Append(ctxT(t), inv)
		first <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "entry appended", func() bool { return c.entryCount() == 1 })
	second := make(chan *rpc.Appended, 1)
	go func() {
		a, err := c.replicas[0].p.Append(ctxT(t), inv)
		if err != nil {
			t.Errorf("retry: %v", err)
		}
		second <- a
	}()
	if err := <-first; !errors.Is(err, rpc.ErrLostLeadership) {
		t.Fatalf("superseded waiter = %v", err)
	}
	c.setHold(false)
	if a := <-second; a == nil || a.PreviouslyAccepted {
		t.Fatalf("retry reply = %v", a)
	}
	if n := c.countInvokes(t); n != 1 {
		t.Fatalf("retry proposed again: %d invokes in the log", n)
	}
}

// The leader is re-elected in a new term while its entry of the old term is
// uncommitted; the retried request is proposed again in the new term. When
// the old entry commits, its reply must not reach the new waiter: only the
// new term's entry answers it.
func TestOldTermEntryDoesNotAnswerNewTermWaiter(t *testing.T) {
	c := newFakeCluster(t, 3, parked)
	c.setLeader(0, false)
	c.setHold(true)
	p := c.replicas[0].p
	inv := newInvoke("greeter", 1)
	first := make(chan error, 1)
	go func() { _, err := p.Append(ctxT(t), inv); first <- err }()
	testutil.WaitFor(t, 5*time.Second, "term-1 entry", func() bool { return c.countInvokes(t) == 1 })
	c.setLeader(0, true) // re-elected: term 2, entry still uncommitted
	if err := <-first; !errors.Is(err, rpc.ErrLostLeadership) {
		t.Fatalf("term-1 waiter = %v", err)
	}
	second := make(chan *rpc.Appended, 1)
	go func() {
		a, err := p.Append(ctxT(t), inv)
		if err != nil {
			t.Errorf("term-2 append: %v", err)
		}
		second <- a
	}()
	testutil.WaitFor(t, 5*time.Second, "term-2 entry", func() bool { return c.countInvokes(t) == 2 })
	c.commitUpTo(1)
	c.waitApplied()
	if p.OutboxDepth() != 1 {
		t.Fatalf("term-1 entry not applied")
	}
	select {
	case a := <-second:
		t.Fatalf("term-2 waiter answered by the term-1 entry: %v", a)
	default:
	}
	c.commitUpTo(2)
	if a := <-second; a == nil || a.PreviouslyAccepted || !bytes.Equal(a.InvocationId, inv.InvocationId) {
		t.Fatalf("term-2 reply = %v", a)
	}
}

func TestOverloaded(t *testing.T) {
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) { cfg.MaxPending = 1 })
	c.setLeader(0, false)
	c.setHold(true)
	go func() { _, _ = c.replicas[0].p.Append(ctxT(t), newInvoke("greeter", 1)) }()
	testutil.WaitFor(t, 5*time.Second, "first pending", func() bool { return c.replicas[0].p.tracker.Len() == 1 })
	if _, err := c.replicas[0].p.Append(ctxT(t), newInvoke("greeter", 2)); !errors.Is(err, rpc.ErrOverloaded) {
		t.Fatalf("second append = %v, want ErrOverloaded", err)
	}
	// A waiter whose ctx ends is removed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.setHold(false)
	testutil.WaitFor(t, 5*time.Second, "first applied", func() bool { return c.replicas[0].p.tracker.Len() == 0 })
	if _, err := c.replicas[0].p.Append(ctx, newInvoke("greeter", 3)); !errors.Is(err, context.Canceled) {
		// It may also have been answered before noticing the ctx.
		if err != nil {
			t.Fatalf("cancelled append = %v", err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "waiter removed", func() bool { return c.replicas[0].p.tracker.Len() == 0 })
}

func TestInvokeRunsAndAttach(t *testing.T) {
	svc := newRecordingService(t)
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) { cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	svc.block = make(chan struct{})
	inv := newInvoke("greeter", 7)
	inv.IdempotencyKey = "k1"
	p := c.replicas[0].p
	if _, err := p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	got := make(chan *rpc.InvocationResult, 1)
	go func() {
		res, err := p.Attach(ctxT(t), inv.InvocationId)
		if err != nil {
			t.Errorf("attach: %v", err)
		}
		got <- res
	}()
	id, _ := invocation.IDFromBytes(inv.InvocationId)
	testutil.WaitFor(t, 5*time.Second, "delivery", func() bool { return svc.count(id) == 1 })
	rec, err := p.Status(ctxT(t), inv.InvocationId)
	if err != nil || rec.State != rpc.InvocationRecord_RUNNING {
		t.Fatalf("status while delivering = %v, %v", rec.GetState(), err)
	}
	close(svc.block)
	res := <-got
	if res.Result.Status != 200 || string(res.Result.Body) != "echo:hello 7" || res.Result.Failed || res.IdempotencyKey != "k1" || res.Result.Attempts != 1 {
		t.Fatalf("result = %v", res)
	}
	h := svc.headers[id.String()]
	if h.Get("x-raftgate-attempt") != "1" || h.Get("idempotency-key") != "k1" || h.Get("Content-Type") != "text/plain" {
		t.Fatalf("headers = %v", h)
	}
	// A duplicate Invoke of a completed invocation reports it.
	dup := newInvoke("greeter", 8)
	dup.InvocationId = inv.InvocationId
	a, err := p.Append(ctxT(t), dup)
	if err != nil || !a.PreviouslyAccepted || a.CompletedAtUnixMs == 0 {
		t.Fatalf("append of completed = %v, %v", a, err)
	}
	if p.OutboxDepth() != 0 {
		t.Fatalf("outbox depth %d", p.OutboxDepth())
	}
	if _, err := p.Output(ctxT(t), invocation.Random().Bytes()); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("output of unknown = %v", err)
	}
}

func TestRetriesAndTerminalFailures(t *testing.T) {
	svc := newRecordingService(t)
	svc.answer = func(id string, attempt int, body []byte) (int, http.Header, []byte) {
		switch {
		case strings.HasSuffix(string(body), "flaky") && attempt < 3:
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"0"}}, []byte("busy")
		case strings.HasSuffix(string(body), "bad"):
			return http.StatusBadRequest, nil, []byte("no such greeting")
		case strings.HasSuffix(string(body), "down"):
			return http.StatusInternalServerError, nil, []byte("broken")
		}
		return http.StatusOK, nil, body
	}
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) { cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	p := c.replicas[0].p
	submit := func(body string) *rpc.Invoke {
		inv := newInvoke("greeter", 0)
		inv.Body = []byte(body)
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		return inv
	}
	flaky, bad, down := submit("flaky"), submit("bad"), submit("down")
	if r := awaitOutput(t, p, flaky.InvocationId).Result; r.Status != 200 || r.Failed || r.Attempts != 3 {
		t.Fatalf("flaky = %v", r)
	}
	if r := awaitOutput(t, p, bad.InvocationId).Result; r.Status != 400 || !r.Failed || string(r.Body) != "no such greeting" || r.Attempts != 1 {
		t.Fatalf("bad = %v", r)
	}
	r := awaitOutput(t, p, down.InvocationId).Result
	if r.Status != 500 || !r.Failed || r.Attempts != 5 || !strings.Contains(r.Error, "gave up after 5 attempts") {
		t.Fatalf("down = %v", r)
	}
	id, _ := invocation.IDFromBytes(down.InvocationId)
	if n := svc.count(id); n != 5 {
		t.Fatalf("down delivered %d times, want 5", n)
	}
}

// TestRegistryUnsureIsRetried: while the registry cannot tell whether the
// service exists, deliveries are retried; once it can, the invocation runs.
func TestRegistryUnsureIsRetried(t *testing.T) {
	svc := newRecordingService(t)
	lookup := &switchableServices{}
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = lookup
		cfg.Invoker.Retry.MaxAttempts = 1000
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	inv := newInvoke("late", 1)
	if _, err := p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "a failed attempt", func() bool {
		rec, err := p.Status(ctxT(t), inv.InvocationId)
		return err == nil && rec.Attempts >= 2 && strings.Contains(rec.LastError, "cannot check")
	})
	lookup.set(svc.lookup("late"))
	if r := awaitOutput(t, p, inv.InvocationId).Result; r.Status != 200 || r.Failed {
		t.Fatalf("result = %v", r)
	}
}

// TestRemovedServiceFailsAtOnce (issue 15, item 3): an invocation whose
// service is not registered any more fails on its first attempt with a
// terminal 404 saying so, without calling anything.
func TestRemovedServiceFailsAtOnce(t *testing.T) {
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = staticServices{}
		cfg.Invoker.Retry.MaxAttempts = 10
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	inv := newInvoke("gone", 1)
	if _, err := p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	r := awaitOutput(t, p, inv.InvocationId).Result
	if r.Status != 404 || !r.Failed || r.Attempts != 1 || !strings.Contains(r.Error, `service "gone" was removed`) {
		t.Fatalf("result = %v, want a terminal 404 after 1 attempt", r)
	}
}

// switchableServices cannot tell (rpc.ErrUnavailable) until set.
type switchableServices struct {
	mu sync.Mutex
	s  staticServices
}

func (s *switchableServices) set(v staticServices) { s.mu.Lock(); s.s = v; s.mu.Unlock() }
func (s *switchableServices) Lookup(ctx context.Context, name string) (*rpc.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return nil, fmt.Errorf("registry: %w", rpc.ErrUnavailable)
	}
	return s.s.Lookup(ctx, name)
}

func TestConcurrencyBounds(t *testing.T) {
	svc := newRecordingService(t)
	svc.block = make(chan struct{})
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = staticServices{"a": {Name: "a", Url: svc.srv.URL}, "b": {Name: "b", Url: svc.srv.URL}}
		cfg.Invoker.Concurrency = 5
		cfg.Invoker.ServiceConcurrency = 3
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	for i := range 40 {
		name := "a"
		if i%4 == 0 {
			name = "b"
		}
		if _, err := p.Append(ctxT(t), newInvoke(name, i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "5 deliveries in flight", func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return svc.inflight == 5
	})
	p.invoker.mu.Lock()
	perA := p.invoker.perService["a"]
	p.invoker.mu.Unlock()
	if perA > 3 {
		t.Fatalf("service a has %d in flight, limit 3", perA)
	}
	close(svc.block)
	testutil.WaitFor(t, 10*time.Second, "outbox drained", func() bool { return p.OutboxDepth() == 0 })
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if svc.maxInfl > 5 {
		t.Fatalf("max in flight %d, limit 5", svc.maxInfl)
	}
}
