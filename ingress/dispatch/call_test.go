package dispatch

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/raftgate/raftgate/rpc"
)

// callingBackend is a fakeBackend that serves calls (CallBackend), as a
// node of this release does; a bare fakeBackend stands for an older one.
type callingBackend struct {
	*fakeBackend
	calls atomic.Int64
	hook  func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error)
}

func (b *callingBackend) Call(ctx context.Context, p uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	b.calls.Add(1)
	if err := b.leads(); err != nil {
		return nil, err
	}
	return b.hook(ctx, inv)
}

// startCallingNode starts one dispatch server (node 1, the leader) over a
// callingBackend with hook.
func startCallingNode(t *testing.T, hook func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error)) (*testNode, *callingBackend) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leader := &atomic.Uint64{}
	leader.Store(1)
	fb := &fakeBackend{node: 1, leader: leader, term: 7}
	b := &callingBackend{fakeBackend: fb, hook: hook}
	g := grpc.NewServer()
	s := NewServer(b, ServerConfig{})
	s.Register(g)
	go g.Serve(lis)
	t.Cleanup(func() {
		s.Close()
		g.Stop()
	})
	return &testNode{id: 1, addr: lis.Addr().String(), backend: fb, grpc: g, server: s}, b
}

func resultFor(inv *rpc.Invoke) *rpc.InvocationResult {
	return &rpc.InvocationResult{InvocationId: inv.InvocationId, Result: &rpc.Result{Status: 200, Body: []byte("done")}}
}

// A call is one request to the leader, answered with the result.
func TestCallAnswersResultInOneRequest(t *testing.T) {
	node, b := startCallingNode(t, func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		return &rpc.Appended{InvocationId: inv.InvocationId, Result: resultFor(inv)}, nil
	})
	c := newTestClient(t, []*testNode{node}, 2, nil)
	a, err := c.Call(context.Background(), 1, invoke(1), time.Second)
	if err != nil || string(a.GetResult().GetResult().GetBody()) != "done" {
		t.Fatalf("call = %v, %v; want the result", a, err)
	}
	if calls, appends := b.calls.Load(), b.appends.Load(); calls != 1 || appends != 0 {
		t.Fatalf("%d calls and %d appends reached the node, want one call", calls, appends)
	}
	if n := metricValue(c.metrics.calls.get(opCall, "ok")); n != 1 {
		t.Fatalf("raftgate_dispatch_client_calls_total{op=call} = %v, want 1", n)
	}
}

// A node of an older release ignores attach and answers a plain Appended:
// the call returns it without result, and the caller attaches by id.
func TestCallToOlderNodeAnswersAppendedOnly(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	c := newTestClient(t, nodes, 2, nil)
	inv := invoke(1)
	a, err := c.Call(context.Background(), 1, inv, time.Second)
	if err != nil || a.GetResult() != nil || string(a.GetInvocationId()) != string(inv.InvocationId) {
		t.Fatalf("call to an older node = %v, %v; want Appended without result", a, err)
	}
}

// When the caller's deadline passes while the leader waits, the leader's
// answer (appended, no result) still reaches the caller: it tells an
// accepted invocation from one that may not be.
func TestCallDeadlineAnswersAppended(t *testing.T) {
	node, _ := startCallingNode(t, func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		<-ctx.Done() // timeout_ms reached the server
		return &rpc.Appended{InvocationId: inv.InvocationId}, nil
	})
	c := newTestClient(t, []*testNode{node}, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	a, err := c.Call(ctx, 1, invoke(1), time.Second)
	if err != nil || a == nil || a.GetResult() != nil {
		t.Fatalf("call past its deadline = %v, %v; want Appended without result", a, err)
	}
}

// A call without a leader stops retrying after its append timeout, though
// its context (the wait for the result) has no deadline.
func TestCallStopsRetryingAfterAppendTimeout(t *testing.T) {
	nodes, leader := startNodes(t, 1, ServerConfig{})
	leader.Store(0) // no leader known
	c := newTestClient(t, nodes, 2, nil)
	_, err := c.Call(context.Background(), 1, invoke(1), 300*time.Millisecond)
	var notLeader *rpc.NotLeaderError
	if !errors.Is(err, rpc.ErrUnavailable) || !errors.As(err, &notLeader) {
		t.Fatalf("err %v: want ErrUnavailable with the last NOT_LEADER", err)
	}
}
