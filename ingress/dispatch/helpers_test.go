package dispatch

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// fakeBackend stands in for a node's partition processors: the node named by
// leader leads every partition; the others answer NOT_LEADER naming it.
// Hooks replace the leader's behaviour per test.
type fakeBackend struct {
	node   uint64
	leader *atomic.Uint64
	term   uint64

	appendHook func(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error)
	attachHook func(ctx context.Context, id []byte) (*rpc.InvocationResult, error)

	appends atomic.Int64 // Append calls, leader or not

	mu         sync.Mutex
	requestIDs [][]byte // of every Append and Cancel that reached the leader
	services   []string
}

func (f *fakeBackend) leads() error {
	if l := f.leader.Load(); l != f.node {
		return &rpc.NotLeaderError{Leader: l, Term: f.term}
	}
	return nil
}

func (f *fakeBackend) record(requestID []byte) {
	f.mu.Lock()
	f.requestIDs = append(f.requestIDs, bytes.Clone(requestID))
	f.mu.Unlock()
}

func (f *fakeBackend) seenRequestIDs() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.requestIDs...)
}

func (f *fakeBackend) Append(ctx context.Context, p uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	f.appends.Add(1)
	if err := f.leads(); err != nil {
		return nil, err
	}
	f.record(inv.RequestId)
	if f.appendHook != nil {
		return f.appendHook(ctx, inv)
	}
	return &rpc.Appended{InvocationId: inv.InvocationId}, nil
}

func (f *fakeBackend) Output(ctx context.Context, p uint32, id []byte) (*rpc.InvocationResult, error) {
	if err := f.leads(); err != nil {
		return nil, err
	}
	return lookup(id)
}

func (f *fakeBackend) Attach(ctx context.Context, p uint32, id []byte) (*rpc.InvocationResult, error) {
	if err := f.leads(); err != nil {
		return nil, err
	}
	if f.attachHook != nil {
		return f.attachHook(ctx, id)
	}
	return lookup(id)
}

// lookup answers by the id's first byte: 'F' not found, 'R' not ready,
// 'I' invalid, anything else a result.
func lookup(id []byte) (*rpc.InvocationResult, error) {
	if len(id) > 0 {
		switch id[0] {
		case 'F':
			return nil, rpc.ErrNotFound
		case 'R':
			return nil, rpc.ErrNotReady
		case 'I':
			return nil, rpc.ErrInvalid
		}
	}
	return &rpc.InvocationResult{InvocationId: id, Result: &rpc.Result{Status: 200, Body: id}}, nil
}

func (f *fakeBackend) Status(ctx context.Context, p uint32, id []byte) (*rpc.InvocationRecord, error) {
	if err := f.leads(); err != nil {
		return nil, err
	}
	return &rpc.InvocationRecord{Invoke: &rpc.Invoke{InvocationId: id}, State: rpc.InvocationRecord_COMPLETED}, nil
}

func (f *fakeBackend) Cancel(ctx context.Context, p uint32, requestID, id []byte) error {
	if err := f.leads(); err != nil {
		return err
	}
	f.record(requestID)
	return nil
}

func (f *fakeBackend) List(ctx context.Context, p uint32, req *rpc.ListInvocations) (*rpc.InvocationList, error) {
	if err := f.leads(); err != nil {
		return nil, err
	}
	return &rpc.InvocationList{Scanned: req.GetLimit()}, nil
}

func (f *fakeBackend) PutService(ctx context.Context, svc *rpc.Service) error {
	if err := f.leads(); err != nil {
		return err
	}
	f.mu.Lock()
	f.services = append(f.services, svc.Name)
	f.mu.Unlock()
	return nil
}

func (f *fakeBackend) DeleteService(ctx context.Context, name string) error {
	if err := f.leads(); err != nil {
		return err
	}
	f.mu.Lock()
	f.services = append(f.services, "-"+name)
	f.mu.Unlock()
	return nil
}

func (f *fakeBackend) FenceService(ctx context.Context, p uint32, requestID []byte, service string, index uint64) error {
	if err := f.leads(); err != nil {
		return err
	}
	f.record(requestID)
	f.mu.Lock()
	f.services = append(f.services, fmt.Sprintf("fence %s@%d in %d", service, index, p))
	f.mu.Unlock()
	return nil
}

// testNode is one node's dispatch server on 127.0.0.1.
type testNode struct {
	id      uint64
	addr    string
	backend *fakeBackend
	grpc    *grpc.Server
	server  *Server
}

// startNodes starts n dispatch servers (ids 1..n) sharing one leader
// variable, initially node 1.
func startNodes(t testing.TB, n int, cfg ServerConfig) ([]*testNode, *atomic.Uint64) {
	t.Helper()
	leader := &atomic.Uint64{}
	leader.Store(1)
	var nodes []*testNode
	for i := 1; i <= n; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &fakeBackend{node: uint64(i), leader: leader, term: 7}
		g := grpc.NewServer()
		s := NewServer(b, cfg)
		s.Register(g)
		go g.Serve(lis)
		node := &testNode{id: uint64(i), addr: lis.Addr().String(), backend: b, grpc: g, server: s}
		t.Cleanup(func() {
			node.server.Close()
			node.grpc.Stop()
		})
		nodes = append(nodes, node)
	}
	return nodes, leader
}

// fakeResolver records hints and returns a settable leader.
type fakeResolver struct {
	mu     sync.Mutex
	leader uint64
	hints  []uint64
}

func (r *fakeResolver) Leader(uint32) (uint64, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader, 7, r.leader != 0
}

func (r *fakeResolver) Hint(_ uint32, leader, _ uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hints = append(r.hints, leader)
	r.leader = leader
}

func newTestClient(t testing.TB, nodes []*testNode, self uint64, mod func(*ClientConfig)) *Client {
	t.Helper()
	cfg := DefaultClientConfig()
	cfg.Self = self
	cfg.Peers = map[uint64]string{}
	for _, n := range nodes {
		cfg.Peers[n.id] = n.addr
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func invoke(i int) *rpc.Invoke {
	id := make([]byte, 24)
	id[0], id[1], id[2] = 'X', byte(i>>8), byte(i)
	return &rpc.Invoke{InvocationId: id, RequestId: invocation.NewRequestID(), Service: "S", Handler: "h"}
}

// metricValue reads a counter or gauge.
func metricValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
