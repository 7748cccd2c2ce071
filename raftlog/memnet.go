package raftlog

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// MemNetwork is an in-memory network between the nodes of one process, for
// tests (Knobs.Network; raftlog/raftlogtest builds clusters on it), with
// faults driven by a seeded RNG: cut links, drop a percentage, delay, and an
// interceptor that sees (and may change or drop) every delivered message.
type MemNetwork struct {
	// mu guards every field below.
	mu      sync.Mutex
	nodes   map[uint64]*Node
	cut     map[[2]uint64]bool
	dropPct int
	delay   time.Duration
	rng     *rand.Rand
	// onSend, when set, sees every message a node sends (before faults).
	onSend atomic.Pointer[func(from uint64, group GroupID, m *pb.Message)]
	// intercept, when set, sees each message about to be delivered.
	intercept atomic.Pointer[func(from uint64, group GroupID, m *pb.Message) bool]
	// stepped: a sent message waits in inflight until the test delivers
	// or drops it (NewSteppedMemNetwork).
	stepped  bool
	inflight []InFlight
}

// InFlight is a message of a stepped network not yet delivered.
type InFlight struct {
	From, To uint64
	Group    GroupID
	Type     pb.MessageType
	deliver  func()
}

// NewSteppedMemNetwork returns a network that delivers nothing by itself:
// the test (driving nodes with Knobs.Stepped) delivers or drops each sent
// message in an order of its choosing (InFlight, Deliver, Drop).
func NewSteppedMemNetwork(seed uint64) *MemNetwork {
	nw := NewMemNetwork(seed)
	nw.stepped = true
	return nw
}

// InFlight returns the messages sent and not yet delivered or dropped, in
// the order they were sent.
func (nw *MemNetwork) InFlight() []InFlight {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return slices.Clone(nw.inflight)
}

// Deliver delivers the i-th message in flight (its receiver's group gets
// it in its inbox); Drop loses it.
func (nw *MemNetwork) Deliver(i int) {
	nw.mu.Lock()
	m := nw.inflight[i]
	nw.inflight = slices.Delete(nw.inflight, i, i+1)
	nw.mu.Unlock()
	m.deliver()
}

func (nw *MemNetwork) Drop(i int) {
	nw.mu.Lock()
	nw.inflight = slices.Delete(nw.inflight, i, i+1)
	nw.mu.Unlock()
}

// hold queues a stepped network's message.
func (nw *MemNetwork) hold(m InFlight) {
	nw.mu.Lock()
	nw.inflight = append(nw.inflight, m)
	nw.mu.Unlock()
}

// NewMemNetwork returns a network with no faults whose random faults
// (SetFaults) are drawn from seed.
func NewMemNetwork(seed uint64) *MemNetwork {
	return &MemNetwork{
		nodes: make(map[uint64]*Node),
		cut:   make(map[[2]uint64]bool),
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

func (nw *MemNetwork) attach(n *Node) {
	nw.mu.Lock()
	nw.nodes[n.cfg.NodeID] = n
	nw.mu.Unlock()
}

func (nw *MemNetwork) detach(id uint64, n *Node) {
	nw.mu.Lock()
	if nw.nodes[id] == n {
		delete(nw.nodes, id)
	}
	nw.mu.Unlock()
}

// Isolate cuts every link between id and the nodes of all.
func (nw *MemNetwork) Isolate(id uint64, all []uint64) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for _, o := range all {
		if o != id {
			nw.cut[[2]uint64{id, o}] = true
			nw.cut[[2]uint64{o, id}] = true
		}
	}
}

// Heal restores every link and turns random faults off.
func (nw *MemNetwork) Heal() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	clear(nw.cut)
	nw.dropPct, nw.delay = 0, 0
}

// SetFaults drops dropPct percent of messages and delays the others by up
// to delay.
func (nw *MemNetwork) SetFaults(dropPct int, delay time.Duration) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.dropPct, nw.delay = dropPct, delay
}

// Intercept calls fn (nil: none) with each message about to be delivered,
// a copy the receiver owns: fn may change it, or return false to drop it
// (a lost message; the sender is not told). fn runs on the sender's
// goroutine and must not block.
func (nw *MemNetwork) Intercept(fn func(from uint64, group GroupID, m *pb.Message) bool) {
	if fn == nil {
		nw.intercept.Store(nil)
		return
	}
	nw.intercept.Store(&fn)
}

// Inject delivers m to node to as if its sender (m.From, a member of the
// group) had sent it, past every fault: a test forges raft messages with it
// (MsgTimeoutNow to start an election at a chosen replica). It reports
// whether the node took the message.
func (nw *MemNetwork) Inject(to uint64, group GroupID, m *pb.Message) bool {
	nw.mu.Lock()
	dst := nw.nodes[to]
	nw.mu.Unlock()
	return dst != nil && dst.deliver(group, proto.Clone(m).(*pb.Message)) == delivered
}

// route decides one message's fate: its destination (nil = lost) and delay.
func (nw *MemNetwork) route(from, to uint64) (*Node, time.Duration) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	dst := nw.nodes[to]
	if dst == nil || nw.cut[[2]uint64{from, to}] {
		return nil, 0
	}
	if nw.dropPct > 0 && nw.rng.IntN(100) < nw.dropPct {
		return nil, 0
	}
	var d time.Duration
	if nw.delay > 0 {
		d = time.Duration(nw.rng.Int64N(int64(nw.delay)))
	}
	return dst, d
}

// memTransport is one node's endpoint on a MemNetwork. Messages are marshalled and
// unmarshalled as on the wire, so no pointer is shared between nodes.
type memTransport struct {
	nw   *MemNetwork
	n    *Node
	wg   sync.WaitGroup
	stop chan struct{}
}

func (nw *MemNetwork) transportFor(n *Node) transport {
	t := &memTransport{nw: nw, n: n, stop: make(chan struct{})}
	nw.attach(n)
	return t
}

func (t *memTransport) send(group GroupID, msgs []*pb.Message) {
	for _, m := range msgs {
		if fn := t.nw.onSend.Load(); fn != nil {
			(*fn)(t.n.cfg.NodeID, group, m)
		}
		dst, d := t.nw.route(t.n.cfg.NodeID, NodeOf(m.GetTo()))
		if dst == nil || !t.n.isPeer(NodeOf(m.GetTo())) {
			t.n.reportUnreachable(group, m.GetTo())
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		deliver := func() {
			cp := &pb.Message{}
			if err := proto.Unmarshal(b, cp); err != nil {
				panic(err)
			}
			if fn := t.nw.intercept.Load(); fn != nil && !(*fn)(t.n.cfg.NodeID, group, cp) {
				return
			}
			// As the gRPC server does: a removed node, or a removed
			// replica, gets the "removed" answer.
			switch {
			case dst.isGone(t.n.cfg.NodeID):
				t.n.removedByPeer(group, cp.GetFrom())
			case !dst.isPeer(t.n.cfg.NodeID):
			case dst.deliver(group, cp) == fromRemoved:
				t.n.removedByPeer(group, cp.GetFrom())
			}
		}
		if t.nw.stepped {
			t.nw.hold(InFlight{From: t.n.cfg.NodeID, To: dst.cfg.NodeID, Group: group, Type: m.GetType(), deliver: deliver})
			continue
		}
		if d == 0 {
			deliver()
			continue
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			timer := time.NewTimer(d)
			defer timer.Stop()
			select {
			case <-timer.C:
				deliver()
			case <-t.stop:
			}
		}()
	}
}

func (t *memTransport) sendSnapshot(group GroupID, m *pb.Message) {
	peer := NodeOf(m.GetTo())
	if !t.n.snaps.startSend(peer) {
		t.n.reportSnapshot(group, m.GetTo(), false)
		return
	}
	send := func() {
		ok := t.streamSnapshot(group, m)
		t.n.snaps.doneSend(peer)
		t.n.reportSnapshot(group, m.GetTo(), ok)
	}
	if t.nw.stepped {
		// Streamed whole when the test delivers it.
		t.nw.hold(InFlight{From: t.n.cfg.NodeID, To: peer, Group: group, Type: m.GetType(), deliver: send})
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		send()
	}()
}

func (t *memTransport) streamSnapshot(group GroupID, m *pb.Message) bool {
	dst, _ := t.nw.route(t.n.cfg.NodeID, NodeOf(m.GetTo()))
	if dst == nil || !t.n.isPeer(dst.cfg.NodeID) || !dst.isPeer(t.n.cfg.NodeID) {
		return false
	}
	var sink *snapshotSink
	err := t.n.streamSnapshot(group, m, func(msg *pb.Message, data []byte, last bool) error {
		if msg != nil {
			var err error
			if sink, err = dst.newSnapshotSink(group, proto.Clone(msg).(*pb.Message)); err != nil {
				return err
			}
		}
		if err := sink.write(data); err != nil {
			return err
		}
		if last {
			return sink.finish()
		}
		return nil
	})
	if err != nil && sink != nil {
		sink.abort()
	}
	if errors.Is(err, ErrRemoved) {
		t.n.removedByPeer(group, m.GetFrom())
	}
	return err == nil
}

// The in-memory network reads the address book at every send.
func (t *memTransport) setPeer(uint64, string) {}
func (t *memTransport) removePeer(uint64)      {}

func (t *memTransport) close() {
	t.nw.detach(t.n.cfg.NodeID, t.n)
	close(t.stop)
	t.wg.Wait()
}
