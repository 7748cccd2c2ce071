package dispatch

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/rpc"
)

// TestPipelinedOutOfOrder sends 1,000 concurrent requests over one stream;
// the backend holds them all and answers in random order; every caller must
// get its own answer.
func TestPipelinedOutOfOrder(t *testing.T) {
	const n = 1000
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var mu sync.Mutex
	var held []chan struct{}
	allHeld := make(chan struct{})
	nodes[0].backend.appendHook = func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		release := make(chan struct{})
		mu.Lock()
		held = append(held, release)
		if len(held) == n {
			close(allHeld)
		}
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &rpc.Appended{InvocationId: inv.InvocationId}, nil
	}
	c := newTestClient(t, nodes, 1, nil)

	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inv := invoke(i)
			a, err := c.Append(context.Background(), 1, inv)
			switch {
			case err != nil:
				errs <- err
			case !bytes.Equal(a.InvocationId, inv.InvocationId):
				errs <- errors.New("answer for another request")
			}
		}()
	}
	select {
	case <-allHeld:
	case <-time.After(20 * time.Second):
		t.Fatal("the backend never held all requests at once: they were not pipelined")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	for _, release := range held {
		close(release)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := metricValue(c.metrics.opened); got != 1 {
		t.Fatalf("opened %v streams, want 1", got)
	}
}

func TestNotLeaderRedirectsToNamedLeader(t *testing.T) {
	nodes, leader := startNodes(t, 3, ServerConfig{})
	leader.Store(3)
	res := &fakeResolver{}
	c := newTestClient(t, nodes, 1, func(cfg *ClientConfig) { cfg.Resolver = res })
	inv := invoke(1)
	if _, err := c.Append(context.Background(), 1, inv); err != nil {
		t.Fatal(err)
	}
	if a1, a2, a3 := nodes[0].backend.appends.Load(), nodes[1].backend.appends.Load(), nodes[2].backend.appends.Load(); a1 != 1 || a2 != 0 || a3 != 1 {
		t.Fatalf("appends per node %d %d %d, want 1 0 1 (self, then the named leader)", a1, a2, a3)
	}
	if len(res.hints) != 1 || res.hints[0] != 3 {
		t.Fatalf("resolver hints %v, want [3]", res.hints)
	}
	// The next call goes straight to the leader the resolver now knows.
	if _, err := c.Append(context.Background(), 1, invoke(2)); err != nil {
		t.Fatal(err)
	}
	if a1, a3 := nodes[0].backend.appends.Load(), nodes[2].backend.appends.Load(); a1 != 1 || a3 != 2 {
		t.Fatalf("second call: appends node1 %d node3 %d, want 1 and 2", a1, a3)
	}
	// Without a resolver the answer's hint alone routes the retry.
	plain := newTestClient(t, nodes, 1, nil)
	if _, err := plain.Append(context.Background(), 1, invoke(3)); err != nil {
		t.Fatal(err)
	}
	if a1, a2, a3 := nodes[0].backend.appends.Load(), nodes[1].backend.appends.Load(), nodes[2].backend.appends.Load(); a1 != 2 || a2 != 0 || a3 != 3 {
		t.Fatalf("without resolver: appends per node %d %d %d, want 2 0 3", a1, a2, a3)
	}
}

func TestLostLeadershipRetriedWithSameRequestID(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var failures atomic.Int64
	nodes[0].backend.appendHook = func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		if failures.Add(1) <= 3 {
			return nil, rpc.ErrLostLeadership
		}
		return &rpc.Appended{InvocationId: inv.InvocationId}, nil
	}
	c := newTestClient(t, nodes, 1, func(cfg *ClientConfig) { cfg.BackoffBase = time.Millisecond; cfg.BackoffMax = 5 * time.Millisecond })

	inv := invoke(1)
	inv.RequestId = nil // the client must generate one and keep it
	if _, err := c.Append(context.Background(), 1, inv); err != nil {
		t.Fatal(err)
	}
	ids := nodes[0].backend.seenRequestIDs()
	if len(ids) != 4 {
		t.Fatalf("%d attempts, want 4", len(ids))
	}
	for _, id := range ids {
		if len(id) != 16 || !bytes.Equal(id, ids[0]) {
			t.Fatalf("request ids differ across retries: %x", ids)
		}
	}
	if inv.RequestId != nil {
		t.Fatal("the caller's Invoke was modified")
	}
}

// TestBrokenStreamFailsInFlightAtOnce stops the leader's gRPC server with
// requests in flight: they must fail at once and succeed at the new leader
// (not fail when their context's deadline passes).
func TestBrokenStreamFailsInFlightAtOnce(t *testing.T) {
	const n = 50
	nodes, leader := startNodes(t, 2, ServerConfig{})
	var held, cancelled atomic.Int64
	nodes[0].backend.appendHook = func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		held.Add(1)
		<-ctx.Done() // never answers
		cancelled.Add(1)
		return nil, ctx.Err()
	}
	res := &fakeResolver{leader: 1}
	c := newTestClient(t, nodes, 1, func(cfg *ClientConfig) { cfg.Resolver = res })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			inv := invoke(i)
			a, err := c.Append(ctx, 1, inv)
			if err == nil && !bytes.Equal(a.InvocationId, inv.InvocationId) {
				err = errors.New("answer for another request")
			}
			errs <- err
		}()
	}
	testutil.WaitFor(t, 10*time.Second, "all requests held by node 1", func() bool { return held.Load() == n })
	leader.Store(2)
	nodes[0].grpc.Stop()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := cancelled.Load(); got != n {
		t.Fatalf("%d backend contexts cancelled on node 1, want %d", got, n)
	}
	if got := nodes[1].backend.appends.Load(); got != n {
		t.Fatalf("node 2 got %d appends, want %d", got, n)
	}
}

// TestServerCloseFailsInFlightWithLostLeadership: Close answers what is in
// flight with LOST_LEADERSHIP; the client retries the same request ids at
// the new leader.
func TestServerCloseFailsInFlightWithLostLeadership(t *testing.T) {
	const n = 20
	nodes, leader := startNodes(t, 2, ServerConfig{})
	var held atomic.Int64
	nodes[0].backend.appendHook = func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		held.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newTestClient(t, nodes, 1, nil)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Append(context.Background(), 1, invoke(i))
			errs <- err
		}()
	}
	testutil.WaitFor(t, 10*time.Second, "all requests held by node 1", func() bool { return held.Load() == n })
	leader.Store(2)
	nodes[0].server.Close()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := metricValue(c.metrics.retries.get("lost_leadership", "")); got != n {
		t.Fatalf("%v retries after lost leadership, want %d", got, n)
	}
	first, second := nodes[0].backend.seenRequestIDs(), nodes[1].backend.seenRequestIDs()
	seen := map[string]bool{}
	for _, id := range first {
		seen[string(id)] = true
	}
	for _, id := range second {
		if !seen[string(id)] {
			t.Fatalf("request id %x at the new leader was never sent to the old one", id)
		}
	}
}

func TestClientOverloadedPastBound(t *testing.T) {
	const bound = 8
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var held atomic.Int64
	nodes[0].backend.attachHook = func(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
		held.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newTestClient(t, nodes, 1, func(cfg *ClientConfig) { cfg.MaxInFlightPerNode = bound })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range bound {
		go c.Attach(ctx, 1, []byte("x"))
	}
	testutil.WaitFor(t, 5*time.Second, "bound attaches held", func() bool { return held.Load() == bound })
	// The held attaches never end: a call that waited for a slot would
	// never return.
	errc := make(chan error, 1)
	go func() {
		_, err := c.Attach(ctx, 1, []byte("y"))
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, rpc.ErrOverloaded) {
			t.Fatalf("err %v, want ErrOverloaded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a call past the bound waited for a slot instead of failing with ErrOverloaded")
	}
}

func TestServerOverloadedPastStreamBound(t *testing.T) {
	const bound = 5
	nodes, _ := startNodes(t, 1, ServerConfig{MaxInFlightPerStream: bound})
	var held atomic.Int64
	nodes[0].backend.attachHook = func(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
		held.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newTestClient(t, nodes, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range bound {
		go c.Attach(ctx, 1, []byte("x"))
	}
	testutil.WaitFor(t, 5*time.Second, "bound attaches held", func() bool { return held.Load() == bound })
	_, err := c.Output(context.Background(), 1, []byte("y"))
	if !errors.Is(err, rpc.ErrOverloaded) {
		t.Fatalf("err %v, want ErrOverloaded from the server", err)
	}
	if got := metricValue(nodes[0].server.metrics.overloaded); got != 1 {
		t.Fatalf("server counted %v overloads, want 1", got)
	}
}

func TestDeadlineWithoutLeaderIsUnavailable(t *testing.T) {
	nodes, leader := startNodes(t, 3, ServerConfig{})
	leader.Store(0) // election under way: every node answers NOT_LEADER, leader unknown
	c := newTestClient(t, nodes, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := c.Append(ctx, 1, invoke(1))
	var notLeader *rpc.NotLeaderError
	if !errors.Is(err, rpc.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &notLeader) {
		t.Fatalf("err %v: want ErrUnavailable wrapping the deadline and the last NOT_LEADER", err)
	}
	// Backoff: retries, spread over the nodes, not a spin. The delays
	// (from 50 ms, doubling) allow at most 6 attempts in a second; a
	// loaded machine only makes fewer.
	total := nodes[0].backend.appends.Load() + nodes[1].backend.appends.Load() + nodes[2].backend.appends.Load()
	if total < 2 || total > 12 {
		t.Fatalf("%d attempts in a second, want a handful (backoff from 50ms)", total)
	}
}

func TestUnreachableNodesAreUnavailable(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	nodes[0].grpc.Stop()
	c := newTestClient(t, nodes, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Output(ctx, 1, []byte("x"))
	if !errors.Is(err, rpc.ErrUnavailable) || !errors.Is(err, errUnreachable) {
		t.Fatalf("err %v, want ErrUnavailable after unreachable", err)
	}
}

func TestDefinitiveErrorsReturnAtOnce(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	c := newTestClient(t, nodes, 1, nil)
	for _, tc := range []struct {
		id   string
		want error
	}{{"F", rpc.ErrNotFound}, {"R", rpc.ErrNotReady}, {"I", rpc.ErrInvalid}} {
		_, err := c.Output(context.Background(), 1, []byte(tc.id))
		if !errors.Is(err, tc.want) {
			t.Fatalf("Output(%s): %v, want %v", tc.id, err, tc.want)
		}
	}
	if got := metricValue(c.metrics.retries.get("not_leader", "")) +
		metricValue(c.metrics.retries.get("lost_leadership", "")); got != 0 {
		t.Fatalf("%v retries, want none", got)
	}
}

func TestCancelReturnsPromptly(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var held atomic.Int64
	nodes[0].backend.attachHook = func(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
		held.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newTestClient(t, nodes, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Attach(ctx, 1, []byte("x"))
		errc <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "attach held", func() bool { return held.Load() == 1 })
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || errors.Is(err, rpc.ErrUnavailable) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Attach did not return after cancel")
	}
}

// TestAttachDeadlineReachesServer: the server ends the backend's wait when
// the caller's deadline passes (timeout_ms), so abandoned waiters do not
// pile up on the leader.
func TestAttachDeadlineReachesServer(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var ended atomic.Int64
	nodes[0].backend.attachHook = func(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
		<-ctx.Done()
		ended.Add(1)
		return nil, ctx.Err()
	}
	c := newTestClient(t, nodes, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Attach(ctx, 1, []byte("x")); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("err %v, want deadline", err)
	}
	testutil.WaitFor(t, 2*time.Second, "the server to end the backend wait", func() bool { return ended.Load() == 1 })
}

// TestLateAnswerIsDropped: an answer for an abandoned correlation id is
// dropped and the stream keeps working.
func TestLateAnswerIsDropped(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	release := make(chan struct{})
	var held atomic.Int64
	nodes[0].backend.attachHook = func(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
		if string(id) != "slow" {
			return lookup(id)
		}
		held.Add(1)
		<-release // ignores ctx: answers late
		return lookup(id)
	}
	c := newTestClient(t, nodes, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Attach(ctx, 1, []byte("slow"))
		errc <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "attach held", func() bool { return held.Load() == 1 })
	cancel()
	<-errc
	close(release)
	testutil.WaitFor(t, 5*time.Second, "the late answer to be dropped", func() bool { return metricValue(c.metrics.dropped) == 1 })
	r, err := c.Attach(context.Background(), 1, []byte("fast"))
	if err != nil || string(r.InvocationId) != "fast" {
		t.Fatalf("after a dropped answer: %v, %v", r, err)
	}
	if got := metricValue(c.metrics.opened); got != 1 {
		t.Fatalf("%v streams opened, want 1", got)
	}
}

func TestEveryOperation(t *testing.T) {
	nodes, leader := startNodes(t, 2, ServerConfig{})
	leader.Store(2)
	c := newTestClient(t, nodes, 1, nil)
	ctx := context.Background()
	if r, err := c.Output(ctx, 3, []byte("a")); err != nil || string(r.Result.Body) != "a" {
		t.Fatalf("Output: %v %v", r, err)
	}
	if r, err := c.Attach(ctx, 3, []byte("b")); err != nil || string(r.InvocationId) != "b" {
		t.Fatalf("Attach: %v %v", r, err)
	}
	if r, err := c.Status(ctx, 3, []byte("c")); err != nil || r.State != rpc.InvocationRecord_COMPLETED {
		t.Fatalf("Status: %v %v", r, err)
	}
	if err := c.Cancel(ctx, 3, []byte("d")); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if ids := nodes[1].backend.seenRequestIDs(); len(ids) != 1 || len(ids[0]) != 16 {
		t.Fatalf("Cancel request ids %x", ids)
	}
	if err := c.PutService(ctx, &rpc.Service{Name: "Greeter", Url: "http://127.0.0.1:1"}); err != nil {
		t.Fatalf("PutService: %v", err)
	}
	if err := c.DeleteService(ctx, "Greeter"); err != nil {
		t.Fatalf("DeleteService: %v", err)
	}
	if got := nodes[1].backend.services; len(got) != 2 || got[0] != "Greeter" || got[1] != "-Greeter" {
		t.Fatalf("services %v", got)
	}
	if _, err := c.Append(ctx, 1, nil); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("Append(nil): %v", err)
	}
}

func TestClosedClient(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var held atomic.Int64
	nodes[0].backend.attachHook = func(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
		held.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newTestClient(t, nodes, 1, nil)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Attach(context.Background(), 1, []byte("x"))
		errc <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "attach held", func() bool { return held.Load() == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("in-flight call: %v, want ErrClosed", err)
	}
	if _, err := c.Output(context.Background(), 1, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}
