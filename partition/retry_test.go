package partition

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"

	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/rpc"
)

// changingServices is a ServiceLookup a test may change while the invoker
// reads it, as the replicated registry changes under it.
type changingServices struct {
	mu       sync.Mutex
	services map[string]*rpc.Service // guarded by mu
}

func (s *changingServices) Lookup(ctx context.Context, name string) (*rpc.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if svc, ok := s.services[name]; ok {
		return svc, nil
	}
	return nil, rpc.ErrNotFound
}

func (s *changingServices) put(svc *rpc.Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services[svc.Name] = proto.Clone(svc).(*rpc.Service)
}

// A service's registered retry policy replaces the cluster's defaults, and
// a changed policy applies to the deliveries after the change.
func TestServiceRetryPolicy(t *testing.T) {
	clock := newManualClock()
	failing := newRecordingService(t)
	failing.answer = func(string, int, []byte) (int, http.Header, []byte) { return http.StatusServiceUnavailable, nil, nil }
	slow := newRecordingService(t)
	slow.block = make(chan struct{}) // never answers
	t.Cleanup(func() { close(slow.block) })
	services := &changingServices{services: map[string]*rpc.Service{}}
	services.put(&rpc.Service{Name: "flaky", Url: failing.srv.URL,
		Retry: &rpc.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 10_000, MaxBackoffMs: 20_000}})
	services.put(&rpc.Service{Name: "slow", Url: slow.srv.URL, Retry: &rpc.RetryPolicy{MaxAttempts: 1, AttemptTimeoutMs: 50}})
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = services
		// Cluster defaults the registrations override: 5 attempts, 1-5 ms
		// apart, 5 s per attempt.
	})
	c.setLeader(0, false)
	p := c.replicas[0].p

	attempts := func(inv *rpc.Invoke, n uint32) *rpc.InvocationRecord {
		t.Helper()
		var rec *rpc.InvocationRecord
		testutil.WaitFor(t, 5*time.Second, "attempt recorded", func() bool {
			r, err := p.Status(ctxT(t), inv.InvocationId)
			rec = r
			return err == nil && r.Attempts == n
		})
		return rec
	}
	inv := newInvoke("flaky", 1)
	if _, err := p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	// Attempt 1 failed: the next waits 10 s with equal jitter (5 to 10 s),
	// not the cluster's 1 ms; attempt 2 then waits 10 to 20 s.
	rec := attempts(inv, 1)
	if wait := rec.RetryAtUnixMs - clock.Now().UnixMilli(); wait < 5_000 || wait > 10_000 {
		t.Fatalf("retry after attempt 1 in %d ms, want 5000..10000", wait)
	}
	clock.Advance(10 * time.Second)
	rec = attempts(inv, 2)
	if wait := rec.RetryAtUnixMs - clock.Now().UnixMilli(); wait < 10_000 || wait > 20_000 {
		t.Fatalf("retry after attempt 2 in %d ms, want 10000..20000", wait)
	}
	clock.Advance(20 * time.Second)
	if r := awaitOutput(t, p, inv.InvocationId).Result; r.Attempts != 3 || !strings.Contains(r.Error, "gave up after 3 attempts") {
		t.Fatalf("result %v, want a failure after the service's 3 attempts", r)
	}

	// The per-attempt timeout of the registration bounds the call.
	slowInv := newInvoke("slow", 2)
	if _, err := p.Append(ctxT(t), slowInv); err != nil {
		t.Fatal(err)
	}
	if r := awaitOutput(t, p, slowInv.InvocationId).Result; r.Status != 504 || !strings.Contains(r.Error, "no answer within 50ms") {
		t.Fatalf("slow result %v, want a 504 after the service's 50ms", r)
	}

	// A policy changed between attempts: the retry already scheduled
	// stands, the next delivery uses the new limit.
	next := newInvoke("flaky", 3)
	if _, err := p.Append(ctxT(t), next); err != nil {
		t.Fatal(err)
	}
	attempts(next, 1)
	services.put(&rpc.Service{Name: "flaky", Url: failing.srv.URL, Retry: &rpc.RetryPolicy{MaxAttempts: 2}})
	clock.Advance(10 * time.Second)
	if r := awaitOutput(t, p, next.InvocationId).Result; r.Attempts != 2 || !strings.Contains(r.Error, "gave up after 2 attempts") {
		t.Fatalf("result %v, want a failure after the changed policy's 2 attempts", r)
	}
}

// The outbox age gauge is how long the most overdue delivery has been due,
// by the processor's clock.
func TestOutboxOldestAge(t *testing.T) {
	clock := newManualClock()
	stalled := newRecordingService(t)
	stalled.block = make(chan struct{})
	t.Cleanup(func() { close(stalled.block) })
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = stalled.lookup("greeter")
	})
	p := c.replicas[0].p
	if age := p.outboxOldestAge(); age != 0 {
		t.Fatalf("empty outbox: age %v", age)
	}
	c.setLeader(0, false)
	inv := newInvoke("greeter", 1)
	inv.ProposedAtUnixMs = clock.Now().UnixMilli()
	if _, err := p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the delivery under way", func() bool { return p.invoker.isDelivering(inv.InvocationId) })
	clock.Advance(42 * time.Second)
	if age := p.outboxOldestAge(); age < 41.9 || age > 42.1 {
		t.Fatalf("age %v, want 42 s", age)
	}
}
