package dispatch

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftgate/raftgate/rpc"
)

func rawStream(t *testing.T, addr string) rpc.Dispatch_StreamClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s, err := rpc.NewDispatchClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServerTreatsCorrelationIDsAsOpaque drives the server with random
// correlation ids (no order, no density), answers them in random order,
// then half-closes: every id gets exactly its own answer and the stream
// ends cleanly after the last one.
func TestServerTreatsCorrelationIDsAsOpaque(t *testing.T) {
	const n = 200
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var mu sync.Mutex
	var held []chan struct{}
	allHeld := make(chan struct{})
	nodes[0].backend.attachHook = func(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
		release := make(chan struct{})
		mu.Lock()
		held = append(held, release)
		if len(held) == n {
			close(allHeld)
		}
		mu.Unlock()
		<-release
		return lookup(id)
	}
	s := rawStream(t, nodes[0].addr)
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[uint64][]byte{}
	ids := []uint64{0, ^uint64(0)}
	for len(ids) < n {
		ids = append(ids, rng.Uint64())
	}
	for _, corr := range ids {
		id := binary.BigEndian.AppendUint64([]byte("A"), corr)
		want[corr] = id
		if err := s.Send(&rpc.DispatchRequest{CorrelationId: corr, Partition: 1, Body: &rpc.DispatchRequest_Attach{Attach: &rpc.AttachInvocation{InvocationId: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	// A request without a body is answered INVALID, not dropped.
	if err := s.Send(&rpc.DispatchRequest{CorrelationId: 42}); err != nil {
		t.Fatal(err)
	}
	<-allHeld
	rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	for _, r := range held {
		close(r)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	sentAt := map[uint64]int{}
	for i, corr := range ids {
		sentAt[corr] = i
	}
	inversions, last := 0, -1
	for got := 0; ; got++ {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			if got != n+1 || len(want) != 0 {
				t.Fatalf("stream ended after %d answers, %d unanswered", got, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if resp.CorrelationId == 42 && resp.GetError().GetCode() == rpc.DispatchError_INVALID {
			continue
		}
		id, ok := want[resp.CorrelationId]
		if !ok {
			t.Fatalf("answer for unknown or already answered id %d", resp.CorrelationId)
		}
		if string(resp.GetResult().GetInvocationId()) != string(id) {
			t.Fatalf("id %d answered with %x, want %x", resp.CorrelationId, resp.GetResult().GetInvocationId(), id)
		}
		delete(want, resp.CorrelationId)
		if sentAt[resp.CorrelationId] < last {
			inversions++
		}
		last = sentAt[resp.CorrelationId]
	}
	if inversions == 0 {
		t.Fatal("answers came in send order; the test did not exercise reordering")
	}
}

// TestServerCloseAnswersLostLeadershipAndEndsStream checks Close on the wire.
func TestServerCloseAnswersLostLeadershipAndEndsStream(t *testing.T) {
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var cancelled sync.WaitGroup
	cancelled.Add(3)
	held := make(chan struct{}, 3)
	nodes[0].backend.attachHook = func(ctx context.Context, id []byte) (*rpc.InvocationResult, error) {
		held <- struct{}{}
		<-ctx.Done()
		cancelled.Done()
		return nil, ctx.Err()
	}
	s := rawStream(t, nodes[0].addr)
	for i := range 3 {
		if err := s.Send(&rpc.DispatchRequest{CorrelationId: uint64(100 + i), Partition: 1, Body: &rpc.DispatchRequest_Attach{Attach: &rpc.AttachInvocation{InvocationId: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		<-held
	}
	nodes[0].server.Close()
	cancelled.Wait() // the backend's contexts ended
	got := map[uint64]bool{}
	for {
		resp, err := s.Recv()
		if err != nil {
			break
		}
		if resp.GetError().GetCode() != rpc.DispatchError_LOST_LEADERSHIP {
			t.Fatalf("answer %v, want LOST_LEADERSHIP", resp)
		}
		got[resp.CorrelationId] = true
	}
	if len(got) != 3 {
		t.Fatalf("LOST_LEADERSHIP for %v, want 100..102", got)
	}
	// A new stream is refused.
	s2 := rawStream(t, nodes[0].addr)
	if _, err := s2.Recv(); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("stream after Close: %v, want Unavailable", err)
	}
}
