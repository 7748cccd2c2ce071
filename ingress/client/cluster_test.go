package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/ingress"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// memCluster is an in-memory stand-in for the cluster behind the ingress's
// Dispatcher interface: it de-duplicates by invocation id and runs each
// invocation with run (nil: invocations stay pending until finish).
type memCluster struct {
	mu          sync.Mutex
	invocations map[invocation.ID]*memInvocation
	run         func(*rpc.Invoke) *rpc.Result
}

type memInvocation struct {
	invoke *rpc.Invoke
	result *rpc.InvocationResult
	done   chan struct{}
}

func newMemCluster(run func(*rpc.Invoke) *rpc.Result) *memCluster {
	return &memCluster{invocations: map[invocation.ID]*memInvocation{}, run: run}
}

func (m *memCluster) Append(_ context.Context, _ uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	id, err := invocation.IDFromBytes(inv.InvocationId)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", rpc.ErrInvalid, err)
	}
	m.mu.Lock()
	if old, ok := m.invocations[id]; ok {
		m.mu.Unlock()
		return &rpc.Appended{InvocationId: id[:], PreviouslyAccepted: true, NotBeforeUnixMs: old.invoke.NotBeforeUnixMs}, nil
	}
	m.invocations[id] = &memInvocation{invoke: inv, done: make(chan struct{})}
	m.mu.Unlock()
	if m.run != nil {
		m.finish(id, m.run(inv))
	}
	return &rpc.Appended{InvocationId: id[:], NotBeforeUnixMs: inv.NotBeforeUnixMs}, nil
}

func (m *memCluster) finish(id invocation.ID, res *rpc.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mi := m.invocations[id]
	if mi == nil || mi.result != nil {
		return
	}
	// A partition leader stamps the completion with its clock.
	mi.result = &rpc.InvocationResult{InvocationId: id[:], Result: res,
		IdempotencyKey: mi.invoke.IdempotencyKey, CompletedAtUnixMs: time.Now().UnixMilli()}
	close(mi.done)
}

func (m *memCluster) get(idb []byte) (*memInvocation, error) {
	id, err := invocation.IDFromBytes(idb)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", rpc.ErrInvalid, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mi := m.invocations[id]
	if mi == nil {
		return nil, rpc.ErrNotFound
	}
	return mi, nil
}

func (m *memCluster) Output(_ context.Context, _ uint32, idb []byte) (*rpc.InvocationResult, error) {
	mi, err := m.get(idb)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mi.result == nil {
		return nil, rpc.ErrNotReady
	}
	return mi.result, nil
}

func (m *memCluster) Attach(ctx context.Context, _ uint32, idb []byte) (*rpc.InvocationResult, error) {
	mi, err := m.get(idb)
	if err != nil {
		return nil, err
	}
	select {
	case <-mi.done:
		m.mu.Lock()
		defer m.mu.Unlock()
		return mi.result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("attach: %w", rpc.ErrUnavailable)
	}
}

// registry is a static service registry.
type registry map[string]*rpc.Service

func (r registry) Lookup(_ context.Context, name string) (*rpc.Service, error) {
	if s, ok := r[name]; ok {
		return s, nil
	}
	return nil, rpc.ErrNotFound
}

// startIngress serves a real ingress.Handler over cluster on 127.0.0.1.
func startIngress(tb testing.TB, cluster ingress.Dispatcher, mutate func(*ingress.Config)) *httptest.Server {
	cfg := ingress.DefaultConfig()
	cfg.Partitions = 3
	cfg.Dispatcher = cluster
	cfg.Services = registry{"Greeter": {Name: "Greeter", Url: "http://127.0.0.1:1", Handlers: []string{"greet"}}}
	cfg.Retention = time.Hour
	if mutate != nil {
		mutate(&cfg)
	}
	h, err := ingress.New(cfg)
	if err != nil {
		tb.Fatalf("ingress.New: %v", err)
	}
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv
}
