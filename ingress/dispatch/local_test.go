package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftgate/raftgate/rpc"
)

// A request for a partition this node leads runs on its own backend: the
// node's dispatch server sees no stream and no request.
func TestLocalAttemptSkipsTheStream(t *testing.T) {
	nodes, _ := startNodes(t, 3, ServerConfig{})
	c := newTestClient(t, nodes, 1, func(cfg *ClientConfig) { cfg.Local = nodes[0].backend })
	for i := range 20 {
		inv := invoke(i)
		a, err := c.Append(context.Background(), 1, inv)
		if err != nil {
			t.Fatal(err)
		}
		if string(a.InvocationId) != string(inv.InvocationId) {
			t.Fatalf("appended %x, want %x", a.InvocationId, inv.InvocationId)
		}
	}
	if got := nodes[0].backend.appends.Load(); got != 20 {
		t.Fatalf("local backend saw %d appends, want 20", got)
	}
	if got := metricValue(nodes[0].server.metrics.streams); got != 0 {
		t.Fatalf("%v dispatch streams open on the local node, want 0", got)
	}
	if got := metricValue(c.metrics.opened); got != 0 {
		t.Fatalf("client opened %v streams, want 0", got)
	}
	if got := metricValue(c.metrics.local); got != 20 {
		t.Fatalf("local attempts = %v, want 20", got)
	}
}

// A local NOT_LEADER is followed to the leader it names, over a stream,
// with the same request id.
func TestLocalNotLeaderFollowsTheLeader(t *testing.T) {
	nodes, leader := startNodes(t, 3, ServerConfig{})
	leader.Store(2)
	c := newTestClient(t, nodes, 1, func(cfg *ClientConfig) { cfg.Local = nodes[0].backend })
	inv := invoke(1)
	if _, err := c.Append(context.Background(), 1, inv); err != nil {
		t.Fatal(err)
	}
	if got := nodes[0].backend.appends.Load(); got != 1 {
		t.Fatalf("local backend saw %d appends, want 1 (answered NOT_LEADER)", got)
	}
	ids := nodes[1].backend.seenRequestIDs()
	if len(ids) != 1 || string(ids[0]) != string(inv.RequestId) {
		t.Fatalf("leader saw request ids %x, want [%x]", ids, inv.RequestId)
	}
}

// A local call waiting in the backend ends with ErrClosed when the client
// closes, as a stream's calls end when it breaks.
func TestLocalCallEndsWhenClientCloses(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	entered := make(chan struct{})
	nodes[0].backend.appendHook = func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newTestClient(t, nodes, 1, func(cfg *ClientConfig) { cfg.Local = nodes[0].backend })
	errc := make(chan error, 1)
	go func() {
		_, err := c.Append(context.Background(), 1, invoke(1))
		errc <- err
	}()
	<-entered
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("local call still waiting after Close")
	}
}

// The per-node in-flight bound covers local attempts too.
func TestLocalAttemptsAreBounded(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	nodes[0].backend.appendHook = func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		entered <- struct{}{}
		<-release
		return &rpc.Appended{InvocationId: inv.InvocationId}, nil
	}
	c := newTestClient(t, nodes, 1, func(cfg *ClientConfig) {
		cfg.Local = nodes[0].backend
		cfg.MaxInFlightPerNode = 1
	})
	done := make(chan error, 1)
	go func() {
		_, err := c.Append(context.Background(), 1, invoke(1))
		done <- err
	}()
	<-entered
	if _, err := c.Append(context.Background(), 1, invoke(2)); !errors.Is(err, rpc.ErrOverloaded) {
		t.Fatalf("second call: err = %v, want ErrOverloaded", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
