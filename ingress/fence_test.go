package ingress

import (
	"context"
	"sync"
	"testing"

	"github.com/raftgate/raftgate/rpc"
)

// staleServices answers Lookup from a replica that lags (the stale
// registration) and LookupCurrent from the caught-up registry.
type staleServices struct {
	stale, current fakeServices

	mu        sync.Mutex
	caughtUps int // LookupCurrent calls
}

func (s *staleServices) Lookup(ctx context.Context, name string) (*rpc.Service, error) {
	return s.stale.Lookup(ctx, name)
}

func (s *staleServices) LookupCurrent(ctx context.Context, name string) (*rpc.Service, error) {
	s.mu.Lock()
	s.caughtUps++
	s.mu.Unlock()
	return s.current.Lookup(ctx, name)
}

// A send checked against a registration that was removed since is refused
// by its partition; the ingress then looks again, caught up, and answers
// 404 without a second append.
func TestStaleRegistrationOfRemovedServiceIs404(t *testing.T) {
	reg := &staleServices{stale: fakeServices{"Gone": {Name: "Gone", Url: "http://127.0.0.1:1", RegisteredIndex: 3}}, current: fakeServices{}}
	h, fd := newTestHandler(t, func(c *Config) { c.Services = reg })
	appends := 0
	fd.appendHook = func(ctx context.Context, part uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
		appends++
		if inv.ServiceRegisteredIndex != 3 {
			t.Errorf("appended with registered index %d, want the one looked up (3)", inv.ServiceRegisteredIndex)
		}
		return nil, rpc.ErrStaleRegistry
	}
	decodeError(t, do(h, "POST", "/Gone/greet/send", `"x"`), 404, "ingress")
	if appends != 1 || reg.caughtUps != 1 {
		t.Fatalf("%d appends and %d caught-up lookups, want 1 and 1", appends, reg.caughtUps)
	}
}

// A registration replaced since it was looked up: the ingress retries once
// with the current one (a new index), and the partition takes it.
func TestStaleRegistrationIsRetriedWithTheCurrentOne(t *testing.T) {
	reg := &staleServices{
		stale:   fakeServices{"Greeter": {Name: "Greeter", Url: "http://127.0.0.1:1", RegisteredIndex: 3}},
		current: fakeServices{"Greeter": {Name: "Greeter", Url: "http://127.0.0.1:2", RegisteredIndex: 9}},
	}
	h, fd := newTestHandler(t, func(c *Config) { c.Services = reg })
	var seen []uint64
	fd.appendHook = func(ctx context.Context, part uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
		seen = append(seen, inv.ServiceRegisteredIndex)
		if inv.ServiceRegisteredIndex < 9 {
			return nil, rpc.ErrStaleRegistry
		}
		return &rpc.Appended{InvocationId: inv.InvocationId}, nil
	}
	if w := do(h, "POST", "/Greeter/greet/send", `"x"`); w.Code != 202 {
		t.Fatalf("send: %d %s", w.Code, w.Body)
	}
	if len(seen) != 2 || seen[0] != 3 || seen[1] != 9 {
		t.Fatalf("appends checked against %v, want [3 9]", seen)
	}
}

// Refused again (the service changed once more meanwhile): a retry-safe 503,
// not a loop.
func TestStaleTwiceIs503(t *testing.T) {
	reg := &staleServices{
		stale:   fakeServices{"Greeter": {Name: "Greeter", Url: "http://127.0.0.1:1", RegisteredIndex: 3}},
		current: fakeServices{"Greeter": {Name: "Greeter", Url: "http://127.0.0.1:1", RegisteredIndex: 9}},
	}
	h, fd := newTestHandler(t, func(c *Config) { c.Services = reg })
	appends := 0
	fd.appendHook = func(ctx context.Context, part uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
		appends++
		return nil, rpc.ErrStaleRegistry
	}
	w := do(h, "POST", "/Greeter/greet/send", `"x"`)
	decodeError(t, w, 503, "ingress")
	if w.Header().Get("Retry-After") == "" || appends != 2 {
		t.Fatalf("Retry-After %q after %d appends, want one and 2", w.Header().Get("Retry-After"), appends)
	}
}
