package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/rpc"
)

// TestBatchesCarryManyRequestsPerFrame: many concurrent requests are each
// answered with their own answer, and travel in fewer frames than there are
// requests, both ways.
func TestBatchesCarryManyRequestsPerFrame(t *testing.T) {
	const n = 500
	nodes, _ := startNodes(t, 1, ServerConfig{})
	var held atomic.Int64
	release := make(chan struct{})
	nodes[0].backend.appendHook = func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
		held.Add(1)
		select {
		case <-release: // all answers are queued at about the same time
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &rpc.Appended{InvocationId: inv.InvocationId}, nil
	}
	c := newTestClient(t, nodes, 1, nil)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			inv := invoke(i)
			a, err := c.Append(context.Background(), 1, inv)
			if err == nil && !bytes.Equal(a.InvocationId, inv.InvocationId) {
				err = errors.New("answer for another request")
			}
			errs <- err
		}()
	}
	testutil.WaitFor(t, 10*time.Second, "all requests held by the backend", func() bool { return held.Load() == n })
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	m := nodes[0].server.metrics
	in, out := metricValue(m.framesReceived), metricValue(m.framesSent)
	t.Logf("%d requests in %v frames, answered in %v frames", n, in, out)
	if in >= n || out >= n {
		t.Fatalf("%d requests travelled in %v frames and were answered in %v: not batched", n, in, out)
	}
	if got := metricValue(c.metrics.legacy); got != 0 {
		t.Fatalf("%v per-message streams opened to a server that serves Batches", got)
	}
}

// olderServer serves the Dispatch service as releases before Batches did:
// Stream only, Batches answered UNIMPLEMENTED by the generated code.
type olderServer struct {
	rpc.UnimplementedDispatchServer
	s *Server
}

func (o olderServer) Stream(ss rpc.Dispatch_StreamServer) error { return o.s.Stream(ss) }

// startOneNode starts node 1, the leader, with the Dispatch service
// registered by register and the given gRPC server options.
func startOneNode(t testing.TB, register func(*grpc.Server, *Server), opts ...grpc.ServerOption) *testNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leader := &atomic.Uint64{}
	leader.Store(1)
	node := &testNode{id: 1, addr: lis.Addr().String(), backend: &fakeBackend{node: 1, leader: leader, term: 7}, grpc: grpc.NewServer(opts...)}
	node.server = NewServer(node.backend, ServerConfig{})
	register(node.grpc, node.server)
	go node.grpc.Serve(lis)
	t.Cleanup(func() {
		node.server.Close()
		node.grpc.Stop()
	})
	return node
}

// TestFallsBackToStreamForOlderServer: a client dispatching to a node of an
// older release (a rolling upgrade) uses the per-message Stream; nothing is
// sent on the refused Batches stream, so nothing needs a retry.
func TestFallsBackToStreamForOlderServer(t *testing.T) {
	const n = 200
	node := startOneNode(t, func(g *grpc.Server, s *Server) { rpc.RegisterDispatchServer(g, olderServer{s: s}) })
	c := newTestClient(t, []*testNode{node}, 1, nil)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inv := invoke(i)
			a, err := c.Append(context.Background(), 1, inv)
			if err == nil && !bytes.Equal(a.InvocationId, inv.InvocationId) {
				err = errors.New("answer for another request")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if opened, legacy := metricValue(c.metrics.opened), metricValue(c.metrics.legacy); opened != 1 || legacy != 1 {
		t.Fatalf("%v streams opened, %v of them per-message; want 1 and 1", opened, legacy)
	}
	if got := metricValue(c.metrics.retries.get("stream_broken", "")); got != 0 {
		t.Fatalf("%v retries after a broken stream, want none", got)
	}
	if got := metricValue(node.server.metrics.framesReceived); got != n {
		t.Fatalf("the older server received %v frames, want one per request (%d)", got, n)
	}
}

// TestBatchesAgainAfterOlderServerUpgraded: the choice of framing is made
// at every stream open, so once the older node is replaced by a new one on
// the same address (its restart breaks the stream), the client batches.
func TestBatchesAgainAfterOlderServerUpgraded(t *testing.T) {
	older := startOneNode(t, func(g *grpc.Server, s *Server) { rpc.RegisterDispatchServer(g, olderServer{s: s}) })
	c := newTestClient(t, []*testNode{older}, 1, func(cfg *ClientConfig) { cfg.BackoffBase = time.Millisecond; cfg.BackoffMax = 20 * time.Millisecond })
	if _, err := c.Append(context.Background(), 1, invoke(1)); err != nil {
		t.Fatal(err)
	}
	older.server.Close()
	older.grpc.Stop()
	lis, err := net.Listen("tcp", older.addr)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	upgraded := NewServer(older.backend, ServerConfig{})
	upgraded.Register(g)
	go g.Serve(lis)
	t.Cleanup(func() {
		upgraded.Close()
		g.Stop()
	})
	if _, err := c.Append(context.Background(), 1, invoke(2)); err != nil {
		t.Fatal(err)
	}
	if opened, legacy := metricValue(c.metrics.opened), metricValue(c.metrics.legacy); opened != 2 || legacy != 1 {
		t.Fatalf("%v streams opened, %v of them per-message; want 2 and 1", opened, legacy)
	}
	if got := metricValue(upgraded.metrics.framesReceived); got != 1 {
		t.Fatalf("the upgraded server received %v frames, want 1", got)
	}
}

// TestStreamClientServedByNewServer: a client of an older release (plain
// Stream, one message per request) is still served, one answer per
// message.
func TestStreamClientServedByNewServer(t *testing.T) {
	const n = 100
	nodes, _ := startNodes(t, 1, ServerConfig{})
	s := rawStream(t, nodes[0].addr)
	for i := range n {
		id := fmt.Appendf(nil, "A%d", i)
		if err := s.Send(&rpc.DispatchRequest{CorrelationId: uint64(i), Partition: 1, Body: &rpc.DispatchRequest_Output{Output: &rpc.GetOutput{InvocationId: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	answered := map[uint64]bool{}
	for {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("A%d", resp.CorrelationId); string(resp.GetResult().GetInvocationId()) != want || answered[resp.CorrelationId] {
			t.Fatalf("answer %v for correlation id %d", resp, resp.CorrelationId)
		}
		answered[resp.CorrelationId] = true
	}
	if len(answered) != n {
		t.Fatalf("%d answers, want %d", len(answered), n)
	}
	m := nodes[0].server.metrics
	if in, out := metricValue(m.framesReceived), metricValue(m.framesSent); in != n || out != n {
		t.Fatalf("frames in %v out %v, want one per message (%d)", in, out, n)
	}
}

// recordingBatchesClient and recordingBatchesServer keep the frames sent
// through a batch wire.
type recordingBatchesClient struct {
	rpc.Dispatch_BatchesClient // nil: only Send is called
	frames                     []*rpc.DispatchRequestBatch
}

func (r *recordingBatchesClient) Send(f *rpc.DispatchRequestBatch) error {
	r.frames = append(r.frames, f)
	return nil
}

type recordingBatchesServer struct {
	rpc.Dispatch_BatchesServer // nil: only Send is called
	frames                     []*rpc.DispatchResponseBatch
}

func (r *recordingBatchesServer) Send(f *rpc.DispatchResponseBatch) error {
	r.frames = append(r.frames, f)
	return nil
}

// TestBatchWiresSplitFrames: what one send is given is split at the count
// and byte bounds, in order; a message larger than the byte bound goes
// alone.
func TestBatchWiresSplitFrames(t *testing.T) {
	small := func(i int) *rpc.DispatchRequest {
		return &rpc.DispatchRequest{CorrelationId: uint64(i + 1), Partition: 1, Body: &rpc.DispatchRequest_Output{Output: &rpc.GetOutput{InvocationId: []byte("x")}}}
	}
	sized := func(i, bytes int) *rpc.DispatchRequest {
		r := small(i)
		r.Body = &rpc.DispatchRequest_Output{Output: &rpc.GetOutput{InvocationId: make([]byte, bytes)}}
		return r
	}
	var reqs []*rpc.DispatchRequest
	for i := range 3 {
		reqs = append(reqs, small(i))
	}
	reqs = append(reqs, sized(3, 2*maxFrameBytes)) // larger than a frame: alone
	for i := range 4 {
		reqs = append(reqs, sized(4+i, 400<<10)) // two fit in a frame, three do not
	}
	for i := range 300 {
		reqs = append(reqs, small(8+i)) // past the count bound
	}
	want := []int{3, 1, 2, 2 + (maxFrameRequests - 2), 300 - (maxFrameRequests - 2)}

	rc := &recordingBatchesClient{}
	if err := (batchClientWire{s: rc}).send(reqs); err != nil {
		t.Fatal(err)
	}
	var got []int
	var sent []*rpc.DispatchRequest
	for _, f := range rc.frames {
		got = append(got, len(f.Requests))
		sent = append(sent, f.Requests...)
		if size := proto.Size(f); len(f.Requests) > 1 && size > maxFrameBytes {
			t.Fatalf("a frame of %d requests has %d bytes, more than %d", len(f.Requests), size, maxFrameBytes)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("client frames of %v requests, want %v", got, want)
	}
	for i := range reqs {
		if sent[i] != reqs[i] {
			t.Fatalf("request %d sent out of order", i)
		}
	}

	// The server's answers: the same byte bound, MaxSendBatch as the count.
	resps := make([]*rpc.DispatchResponse, len(reqs))
	for i, r := range reqs {
		resps[i] = &rpc.DispatchResponse{CorrelationId: r.CorrelationId, Body: &rpc.DispatchResponse_Result{Result: &rpc.InvocationResult{InvocationId: r.GetOutput().InvocationId}}}
	}
	rs := &recordingBatchesServer{}
	w := batchServerWire{s: rs, maxMsgs: 100, metrics: newServerMetrics(nil, zerolog.Nop())}
	if err := w.send(resps); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, f := range rs.frames {
		got = append(got, len(f.Responses))
		if size := proto.Size(f); len(f.Responses) > 1 && size > maxFrameBytes {
			t.Fatalf("a frame of %d answers has %d bytes, more than %d", len(f.Responses), size, maxFrameBytes)
		}
	}
	if want := []int{3, 1, 2, 100, 100, 100, 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("server frames of %v answers, want %v", got, want)
	}
	if sentFrames := metricValue(w.metrics.framesSent); sentFrames != float64(len(rs.frames)) {
		t.Fatalf("%v frames counted, %d sent", sentFrames, len(rs.frames))
	}
}

// frameSizes records, from a gRPC stats handler, the size and message count
// of every dispatch frame a server receives and sends.
type frameSizes struct {
	mu     sync.Mutex
	frames []frameSize
}

type frameSize struct {
	bytes, msgs int
}

func (f *frameSizes) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (f *frameSizes) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (f *frameSizes) HandleConn(context.Context, stats.ConnStats) {}

func (f *frameSizes) HandleRPC(_ context.Context, s stats.RPCStats) {
	var fs frameSize
	switch p := s.(type) {
	case *stats.InPayload:
		fs = frameSize{bytes: p.Length, msgs: len(p.Payload.(*rpc.DispatchRequestBatch).GetRequests())}
	case *stats.OutPayload:
		fs = frameSize{bytes: p.Length, msgs: len(p.Payload.(*rpc.DispatchResponseBatch).GetResponses())}
	default:
		return
	}
	f.mu.Lock()
	f.frames = append(f.frames, fs)
	f.mu.Unlock()
}

// TestLargeRequestsAndAnswersOverBatches: requests and answers near and
// above the frame budget travel over real gRPC, frames of many stay within
// the budget, and one larger than it travels alone.
func TestLargeRequestsAndAnswersOverBatches(t *testing.T) {
	sizes := &frameSizes{}
	node := startOneNode(t, func(g *grpc.Server, s *Server) { s.Register(g) }, grpc.StatsHandler(sizes))
	c := newTestClient(t, []*testNode{node}, 1, nil)

	// Output answers with the id twice (id and body): 300 KiB ids make
	// 600 KiB answers, the 1.5 MiB id a 3 MiB one.
	idSizes := []int{1536 << 10}
	for range 8 {
		idSizes = append(idSizes, 300<<10)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(idSizes))
	for i, size := range idSizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := bytes.Repeat([]byte{'a' + byte(i)}, size)
			r, err := c.Output(context.Background(), 1, id)
			if err == nil && (!bytes.Equal(r.InvocationId, id) || !bytes.Equal(r.Result.Body, id)) {
				err = fmt.Errorf("request %d: answer for another request", i)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	alone := 0
	for _, f := range sizes.frames {
		if f.msgs > 1 && f.bytes > maxFrameBytes {
			t.Fatalf("a frame of %d messages has %d bytes, more than %d", f.msgs, f.bytes, maxFrameBytes)
		}
		if f.bytes > maxFrameBytes {
			alone++
		}
	}
	if alone != 2 { // the large request and its answer
		t.Fatalf("%d frames above the budget, want 2 (the large request and its answer): %v", alone, sizes.frames)
	}
}
