package partition

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
)

// raftNode is one in-process raftgate node over real raftlog, bbolt (fsync
// on) and gRPC on 127.0.0.1: the metadata group with the registry.Registry and
// partition 1 with a Processor.
type raftNode struct {
	id      uint64
	dataDir string
	node    *raftlog.Node
	srv     *grpc.Server
	reg     *registry.Registry
	proc    *Processor
	meta    *raftlog.Group
	group   *raftlog.Group
	stopped bool
}

type raftCluster struct {
	tb        testing.TB
	ids       []uint64
	peers     map[uint64]string
	tune      func(*raftlog.Config)
	configure func(*Config)
	nodes     []*raftNode
}

func newRaftCluster(tb testing.TB, size int, configure func(*Config)) *raftCluster {
	return newRaftClusterWith(tb, size, nil, configure)
}

func newRaftClusterWith(tb testing.TB, size int, tune func(*raftlog.Config), configure func(*Config)) *raftCluster {
	tb.Helper()
	c := &raftCluster{tb: tb, peers: map[uint64]string{}, tune: tune, configure: configure}
	listeners := map[uint64]net.Listener{}
	for i := 1; i <= size; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		id := uint64(i)
		c.ids = append(c.ids, id)
		c.peers[id], listeners[id] = l.Addr().String(), l
	}
	for i, id := range c.ids {
		c.nodes = append(c.nodes, &raftNode{id: id, dataDir: tb.TempDir()})
		c.start(i, listeners[id])
	}
	tb.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	return c
}

// start opens node i from its data directory and serves on l.
func (c *raftCluster) start(i int, l net.Listener) {
	tb, n := c.tb, c.nodes[i]
	logger := zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel).With().Uint64("node", n.id).Logger()
	rcfg := raftlog.Config{NodeID: n.id, DataDir: n.dataDir, Peers: c.peers, TickInterval: 20 * time.Millisecond, Logger: logger}
	if c.tune != nil {
		c.tune(&rcfg)
	}
	node, err := raftlog.Open(rcfg)
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	node.RegisterGRPC(srv)
	go func() { _ = srv.Serve(l) }()
	reg := registry.New(logger)
	cfg := DefaultConfig()
	cfg.Services = freshRegistry{reg}
	cfg.Logger = logger
	cfg.Invoker.IdleRecheck = 20 * time.Millisecond
	if c.configure != nil {
		c.configure(&cfg)
	}
	proc, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	meta, err := node.AddGroup(raftlog.MetaGroup, c.ids, reg)
	if err != nil {
		tb.Fatal(err)
	}
	group, err := node.AddGroup(raftlog.GroupID(cfg.Partition), c.ids, proc)
	if err != nil {
		tb.Fatal(err)
	}
	reg.Start(meta)
	proc.Start(group)
	node.Watch(func(ev raftlog.LeaderEvent) {
		if ev.Group == raftlog.MetaGroup {
			reg.OnLeadership(ev)
		} else {
			proc.OnLeadership(ev)
		}
	})
	n.node, n.srv, n.reg, n.proc, n.meta, n.group, n.stopped = node, srv, reg, proc, meta, group, false
}

// stop shuts node i down (its data directory stays).
func (c *raftCluster) stop(i int) {
	n := c.nodes[i]
	if n.stopped {
		return
	}
	n.stopped = true
	_ = n.proc.Close()
	n.srv.Stop()
	if err := n.node.Close(); err != nil {
		c.tb.Errorf("close node %d: %v", n.id, err)
	}
}

// restart starts a stopped node i again on its address.
func (c *raftCluster) restart(i int) {
	l, err := net.Listen("tcp", c.peers[c.nodes[i].id])
	if err != nil {
		c.tb.Fatal(err)
	}
	c.start(i, l)
}

// live returns the running nodes.
func (c *raftCluster) live() []*raftNode {
	var out []*raftNode
	for _, n := range c.nodes {
		if !n.stopped {
			out = append(out, n)
		}
	}
	return out
}

// partitionLeader returns the node whose processor believes it leads, or
// nil (cheap: no call into the raft loop).
func (c *raftCluster) partitionLeader() *raftNode {
	for _, n := range c.live() {
		if leading, _, _ := n.proc.tracker.Leadership(); leading {
			return n
		}
	}
	return nil
}

// leaderOf returns the node leading group g as the nodes see it, or nil.
func (c *raftCluster) leaderOf(g raftlog.GroupID) *raftNode {
	for _, n := range c.live() {
		if n.node.Group(g).Status().IsLeader {
			return n
		}
	}
	return nil
}

// register puts a service through the metadata leader and waits until every
// node's registry has it.
func (c *raftCluster) register(tb testing.TB, svc *rpc.Service) {
	tb.Helper()
	testutil.WaitFor(tb, 20*time.Second, "service registered", func() bool {
		lead := c.leaderOf(raftlog.MetaGroup)
		if lead == nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := lead.reg.Put(ctx, svc)
		return err == nil
	})
	testutil.WaitFor(tb, 20*time.Second, "registry replicated", func() bool {
		for _, n := range c.live() {
			if _, ok := n.reg.Lookup(svc.Name); !ok {
				return false
			}
		}
		return true
	})
}

// submit appends inv at whichever node leads, retrying the same request
// on NOT_LEADER, LOST_LEADERSHIP and OVERLOADED as the ingress does.
func (c *raftCluster) submit(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
	backoff := time.Millisecond
	for {
		var nl *rpc.NotLeaderError
		target := c.live()[0]
		if lead := c.partitionLeader(); lead != nil {
			target = lead
		}
		a, err := target.proc.Append(ctx, inv)
		switch {
		case err == nil:
			return a, nil
		case errors.As(err, &nl), errors.Is(err, rpc.ErrLostLeadership), errors.Is(err, rpc.ErrOverloaded):
		default:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("last error %v: %w", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

func TestRaftClusterEveryInvocationHasExactlyOneResult(t *testing.T) {
	if testing.Short() {
		t.Skip("three-node cluster over gRPC")
	}
	svc := newRecordingService(t)
	c := newRaftCluster(t, 3, nil)
	c.register(t, &rpc.Service{Name: "greeter", Url: svc.srv.URL})

	const total, submitters = 1000, 32
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	invs := make([]*rpc.Invoke, total)
	for i := range invs {
		invs[i] = newInvoke("greeter", i)
	}
	acked, wait := c.submitting(t, ctx, invs, submitters)
	// Move leadership twice while invocations are submitted and run.
	moves := 0
	for _, at := range []int64{total / 3, 2 * total / 3} {
		testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d acknowledged", at), func() bool { return acked.Load() >= at })
		var lead *raftNode
		testutil.WaitFor(t, 10*time.Second, "a partition leader", func() bool { lead = c.leaderOf(1); return lead != nil })
		to := c.nodes[(int(lead.id))%len(c.nodes)].id
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		err := lead.group.TransferLeadership(tctx, to)
		tcancel()
		if err != nil {
			t.Fatalf("transfer from %d to %d: %v", lead.id, to, err)
		}
		t.Logf("leadership moved from node %d at %d acknowledged", lead.id, acked.Load())
		moves++
	}
	wait()
	if t.Failed() {
		return
	}
	testutil.WaitFor(t, 60*time.Second, "every outbox drained", func() bool {
		for _, n := range c.nodes {
			if n.proc.OutboxDepth() != 0 {
				return false
			}
		}
		return true
	})
	// Every invocation has its own result, and all replicas agree on it.
	var dumps []string
	for _, n := range c.nodes {
		var b []byte
		for _, inv := range invs {
			res, err := n.proc.readResult(context.Background(), inv.InvocationId)
			if err != nil {
				t.Fatalf("node %d: result of %x: %v", n.id, inv.InvocationId, err)
			}
			if want := "echo:" + string(inv.Body); string(res.Result.Body) != want || res.Result.Failed {
				t.Fatalf("node %d: result %q, want %q", n.id, res.Result.Body, want)
			}
			b = append(b, fmt.Sprintf("%x=%d;", inv.InvocationId, res.CompletedAtUnixMs)...)
		}
		dumps = append(dumps, string(b))
	}
	if dumps[0] != dumps[1] || dumps[1] != dumps[2] {
		t.Fatal("replicas recorded different results")
	}
	ids, deliveries := svc.total()
	if ids != total {
		t.Fatalf("service saw %d distinct invocations, want %d", ids, total)
	}
	for _, inv := range invs {
		id, _ := invocation.IDFromBytes(inv.InvocationId)
		if svc.count(id) < 1 {
			t.Fatalf("%v never delivered", id)
		}
	}
	t.Logf("%d invocations, %d deliveries (%d repeated across %d leader changes)", total, deliveries, deliveries-total, moves)
}

// submitting submits invs from the given number of concurrent submitters
// in the background. acked counts acknowledged submits; wait returns once
// every submitter is done. A failed submit is reported on tb and stops its
// submitter.
func (c *raftCluster) submitting(tb testing.TB, ctx context.Context, invs []*rpc.Invoke, submitters int) (acked *atomic.Int64, wait func()) {
	acked = new(atomic.Int64)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range submitters {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(invs) {
					return
				}
				if _, err := c.submit(ctx, invs[i]); err != nil {
					tb.Errorf("invocation %d: %v", i, err)
					return
				}
				acked.Add(1)
			}
		})
	}
	return acked, wg.Wait
}

// submitAll submits invs with the given number of concurrent submitters
// and returns when all are acknowledged.
func (c *raftCluster) submitAll(t *testing.T, ctx context.Context, invs []*rpc.Invoke, submitters int) {
	t.Helper()
	_, wait := c.submitting(t, ctx, invs, submitters)
	wait()
	if t.Failed() {
		t.FailNow()
	}
}

// A follower is down while invocations run and the log is compacted past
// it; restarted from its data directory, it catches up (from a snapshot)
// and ends with the same state as the others.
func TestRaftClusterFollowerRestartCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("three-node cluster over gRPC")
	}
	svc := newRecordingService(t)
	c := newRaftClusterWith(t, 3, func(cfg *raftlog.Config) { cfg.SnapshotEntries = 40 }, nil)
	c.register(t, &rpc.Service{Name: "greeter", Url: svc.srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	invs := make([]*rpc.Invoke, 600)
	for i := range invs {
		invs[i] = newInvoke("greeter", i)
	}
	c.submitAll(t, ctx, invs[:200], 16)
	var lead *raftNode
	testutil.WaitFor(t, 10*time.Second, "a partition leader", func() bool { lead = c.leaderOf(1); return lead != nil })
	down := 0
	for i, n := range c.nodes {
		if n != lead {
			down = i
			break
		}
	}
	c.stop(down)
	c.submitAll(t, ctx, invs[200:], 16)
	drained := func() bool {
		for _, n := range c.live() {
			if n.proc.OutboxDepth() != 0 {
				return false
			}
		}
		return true
	}
	testutil.WaitFor(t, 30*time.Second, "outboxes drained", drained)
	c.restart(down)
	defer func() {
		if t.Failed() {
			for _, n := range c.nodes {
				st := n.group.Status()
				t.Logf("node %d: leader %d term %d applied %d committed %d outbox %d", n.id, st.Leader, st.Term, st.Applied, st.Committed, n.proc.OutboxDepth())
			}
		}
	}()
	testutil.WaitFor(t, 30*time.Second, "restarted node caught up", func() bool {
		applied := c.nodes[down].group.Status().Applied
		for _, n := range c.live() {
			if n.group.Status().Applied != applied {
				return false
			}
		}
		return drained()
	})
	want := dumpState(t, lead.group.View)
	for _, n := range c.nodes {
		if got := dumpState(t, n.group.View); got != want {
			t.Fatalf("node %d state differs from node %d after catching up", n.id, lead.id)
		}
	}
	for _, inv := range invs {
		if _, err := c.nodes[down].proc.readResult(context.Background(), inv.InvocationId); err != nil {
			t.Fatalf("no result for %x on the node that was down: %v", inv.InvocationId, err)
		}
	}
	t.Logf("node %d restarted at applied index %d", c.nodes[down].id, c.nodes[down].group.Status().Applied)
}

// freshRegistry is the invoker's view of the registry: caught up.
type freshRegistry struct{ reg *registry.Registry }

func (f freshRegistry) Lookup(ctx context.Context, name string) (*rpc.Service, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return f.reg.LookupCurrent(ctx, name)
}
