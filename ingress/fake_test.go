package ingress

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// fakeDispatcher is an in-memory cluster behind the Dispatcher interface:
// it de-duplicates appends by invocation id, keeps results, and lets tests
// complete invocations and inject errors or blocking.
type fakeDispatcher struct {
	mu          sync.Mutex
	invocations map[invocation.ID]*fakeInvocation
	appends     []fakeAppend
	// complete, when set, completes an invocation as soon as it is appended.
	complete func(*rpc.Invoke) *rpc.Result
	// now stamps completions.
	now func() time.Time

	// Hooks replace the default behaviour when set.
	appendHook func(ctx context.Context, part uint32, inv *rpc.Invoke) (*rpc.Appended, error)
	outputHook func(ctx context.Context, part uint32, id []byte) (*rpc.InvocationResult, error)
	// attaching receives the id of every Attach once it is waiting.
	attaching chan invocation.ID
}

type fakeAppend struct {
	partition uint32
	invoke    *rpc.Invoke
}

type fakeInvocation struct {
	invoke *rpc.Invoke
	result *rpc.InvocationResult
	done   chan struct{}
}

func newFakeDispatcher(now func() time.Time) *fakeDispatcher {
	return &fakeDispatcher{invocations: map[invocation.ID]*fakeInvocation{}, now: now}
}

func (f *fakeDispatcher) Append(ctx context.Context, part uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	if f.appendHook != nil {
		return f.appendHook(ctx, part, inv)
	}
	id, err := invocation.IDFromBytes(inv.InvocationId)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", rpc.ErrInvalid, err)
	}
	f.mu.Lock()
	f.appends = append(f.appends, fakeAppend{part, inv})
	existing, ok := f.invocations[id]
	if ok {
		f.mu.Unlock()
		a := &rpc.Appended{InvocationId: id[:], PreviouslyAccepted: true, NotBeforeUnixMs: existing.invoke.NotBeforeUnixMs}
		if existing.result != nil {
			a.CompletedAtUnixMs = existing.result.CompletedAtUnixMs
		}
		return a, nil
	}
	if inv.DelayMs != nil {
		// As a partition leader: its own clock places the delay.
		inv = proto.Clone(inv).(*rpc.Invoke)
		inv.NotBeforeUnixMs = f.now().UnixMilli() + inv.GetDelayMs()
	}
	fi := &fakeInvocation{invoke: inv, done: make(chan struct{})}
	f.invocations[id] = fi
	f.mu.Unlock()
	if f.complete != nil {
		f.finish(id, f.complete(inv))
	}
	return &rpc.Appended{InvocationId: id[:], NotBeforeUnixMs: inv.NotBeforeUnixMs}, nil
}

// finish records the result of invocation id.
func (f *fakeDispatcher) finish(id invocation.ID, res *rpc.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi := f.invocations[id]
	if fi == nil || fi.result != nil {
		return
	}
	fi.result = &rpc.InvocationResult{InvocationId: id[:], Result: res,
		IdempotencyKey: fi.invoke.IdempotencyKey, CompletedAtUnixMs: f.now().UnixMilli()}
	close(fi.done)
}

func (f *fakeDispatcher) Output(ctx context.Context, part uint32, idb []byte) (*rpc.InvocationResult, error) {
	if f.outputHook != nil {
		return f.outputHook(ctx, part, idb)
	}
	id, err := invocation.IDFromBytes(idb)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", rpc.ErrInvalid, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fi := f.invocations[id]
	switch {
	case fi == nil:
		return nil, rpc.ErrNotFound
	case fi.result == nil:
		return nil, rpc.ErrNotReady
	}
	return fi.result, nil
}

func (f *fakeDispatcher) Attach(ctx context.Context, part uint32, idb []byte) (*rpc.InvocationResult, error) {
	id, err := invocation.IDFromBytes(idb)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", rpc.ErrInvalid, err)
	}
	f.mu.Lock()
	fi := f.invocations[id]
	f.mu.Unlock()
	if fi == nil {
		return nil, rpc.ErrNotFound
	}
	if f.attaching != nil {
		f.attaching <- id
	}
	select {
	case <-fi.done:
		f.mu.Lock()
		defer f.mu.Unlock()
		return fi.result, nil
	case <-ctx.Done():
		// As the real dispatcher: the deadline ends its retries.
		return nil, fmt.Errorf("attach: %w: %v", rpc.ErrUnavailable, ctx.Err())
	}
}

func (f *fakeDispatcher) appendCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.appends)
}

func (f *fakeDispatcher) lastAppend(t *testing.T) fakeAppend {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.appends) == 0 {
		t.Fatal("no append recorded")
	}
	return f.appends[len(f.appends)-1]
}

// fakeServices is a static service registry.
type fakeServices map[string]*rpc.Service

func (s fakeServices) Lookup(_ context.Context, name string) (*rpc.Service, error) {
	if svc, ok := s[name]; ok {
		return svc, nil
	}
	return nil, rpc.ErrNotFound
}

// testNow is the fixed proposal clock of the tests.
var testNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// echoResult completes every invocation with its own body.
func echoResult(inv *rpc.Invoke) *rpc.Result {
	return &rpc.Result{Status: 200, Body: inv.Body, ContentType: inv.ContentType, Attempts: 1}
}

// newTestHandler returns a handler over a fake cluster with services
// Greeter (any handler) and Strict (handler "greet" only).
func newTestHandler(t testing.TB, mutate func(*Config)) (*Handler, *fakeDispatcher) {
	t.Helper()
	fd := newFakeDispatcher(func() time.Time { return testNow })
	cfg := DefaultConfig()
	cfg.Partitions = 4
	cfg.Dispatcher = fd
	cfg.Services = fakeServices{
		"Greeter": {Name: "Greeter", Url: "http://127.0.0.1:1"},
		"Strict":  {Name: "Strict", Url: "http://127.0.0.1:1", Handlers: []string{"greet"}},
	}
	cfg.Clock = func() time.Time { return testNow }
	cfg.RequestTimeout = 2 * time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h, fd
}

// do serves one request and returns the recorded answer.
func do(h http.Handler, method, target string, body string, headers ...string) *httptest.ResponseRecorder {
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, target, nil)
	} else {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
