package raftlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/internal/backoff"
	"github.com/raftgate/raftgate/raftlog/raftlogpb"
)

const (
	backoffMin = 50 * time.Millisecond
	backoffMax = time.Second
)

// grpcTransport keeps one Raft.Send stream per peer. A peer's sender
// goroutine drains everything queued for it (messages of all groups) into
// one RaftBatch per stream write, so a busy node sends few, large frames.
type grpcTransport struct {
	n      *Node
	ctx    context.Context
	cancel context.CancelFunc
	opts   []grpc.DialOption
	wg     sync.WaitGroup

	// mu guards peers, which setPeer and removePeer change at run time.
	mu    sync.RWMutex
	peers map[uint64]*peerSender
}

type outbound struct {
	group GroupID
	msg   *pb.Message
}

type peerSender struct {
	t    *grpcTransport
	id   uint64
	addr string
	log  zerolog.Logger
	// ctx ends when the peer is removed or replaced, or the transport
	// closes; done is closed when run has returned.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	conn   *grpc.ClientConn
	client raftlogpb.RaftClient

	// mu guards queue.
	mu    sync.Mutex
	queue []outbound
	wake  chan struct{}

	// outage holds the causes of the current outage (a peer down, a TLS
	// handshake refused) already logged at Warn, nil once a send works:
	// each cause is logged at Warn once per outage, not on every retry nor
	// each time causes alternate. Owned by run.
	outage outageCauses
}

// outageCauses is the set of an outage's causes logged so far: error
// texts without their addresses, whose ports change on every reconnect.
type outageCauses map[string]struct{}

// maxOutageCauses bounds the causes remembered for one outage; any later
// new cause is logged at Debug.
const maxOutageCauses = 16

// addrPattern matches an IPv4 or bracketed IPv6 address, or localhost,
// with an optional port.
var addrPattern = regexp.MustCompile(`\[[0-9A-Fa-f:.]+(%\w+)?\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|\blocalhost(:\d+)?\b`)

// first records err's cause and reports whether it is new to this outage.
func (c outageCauses) first(err error) bool {
	cause := addrPattern.ReplaceAllString(err.Error(), "ADDR")
	if _, seen := c[cause]; seen || len(c) >= maxOutageCauses {
		return false
	}
	c[cause] = struct{}{}
	return true
}

func newGRPCTransport(n *Node) *grpcTransport {
	ctx, cancel := context.WithCancel(context.Background())
	t := &grpcTransport{n: n, ctx: ctx, cancel: cancel, peers: make(map[uint64]*peerSender)}
	// Reconnect within a second to a peer that comes back (gRPC's default
	// backoff grows to 2 minutes, during which a restarted node hears
	// nothing from this one); Config.DialOptions come later and win.
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: backoffMin, Multiplier: 1.6, Jitter: 0.2, MaxDelay: backoffMax},
			MinConnectTimeout: 2 * time.Second,
		}),
	}, n.cfg.DialOptions...)
	t.opts = opts
	for id, addr := range n.cfg.Peers {
		if id != n.cfg.NodeID {
			t.setPeer(id, addr)
		}
	}
	return t
}

// setPeer starts a sender to node id at addr, replacing one to another
// address.
func (t *grpcTransport) setPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return
	}
	old := t.peers[id]
	if old != nil && old.addr == addr {
		return
	}
	ctx, cancel := context.WithCancel(t.ctx)
	p := &peerSender{t: t, id: id, addr: addr, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		wake: make(chan struct{}, 1), log: t.n.log.With().Uint64("peer", id).Str("addr", addr).Logger()}
	conn, err := grpc.NewClient(addr, t.opts...)
	if err != nil {
		// NewClient fails only on a malformed target or options; the
		// peer stays unreachable and raft is told so on every send.
		p.log.Error().Err(err).Msg("raft peer client")
	} else {
		p.conn, p.client = conn, raftlogpb.NewRaftClient(conn)
	}
	t.peers[id] = p
	t.wg.Add(1)
	go p.run()
	if old != nil {
		go old.stop()
	}
}

// removePeer stops the sender to node id.
func (t *grpcTransport) removePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		go p.stop()
	}
}

// peer is the sender to node id, or nil.
func (t *grpcTransport) peer(id uint64) *peerSender {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[id]
}

// stop ends the sender and closes its connection (which ends a snapshot
// it is streaming).
func (p *peerSender) stop() {
	p.cancel()
	<-p.done
	if p.conn != nil {
		_ = p.conn.Close()
	}
}

func (t *grpcTransport) send(group GroupID, msgs []*pb.Message) {
	var unreachable []uint64
	for _, m := range msgs {
		p := t.peer(NodeOf(m.GetTo()))
		if p == nil || !p.enqueue(group, m) {
			t.n.metrics.droppedMsgs.Inc()
			if !slices.Contains(unreachable, m.GetTo()) {
				unreachable = append(unreachable, m.GetTo())
			}
		}
	}
	for _, id := range unreachable {
		t.n.reportUnreachable(group, id)
	}
}

func (p *peerSender) enqueue(group GroupID, m *pb.Message) bool {
	p.mu.Lock()
	if len(p.queue) >= p.t.n.cfg.PeerQueueMessages || p.client == nil {
		p.mu.Unlock()
		return false
	}
	p.queue = append(p.queue, outbound{group: group, msg: m})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return true
}

// run sends queued messages, reopening the stream with backoff after an
// error. Messages queued while the peer is down are dropped and reported:
// raft retransmits, and an unbounded backlog would only be stale.
func (p *peerSender) run() {
	defer p.t.wg.Done()
	defer close(p.done)
	var (
		stream   raftlogpb.Raft_SendClient
		batch    []outbound
		lastSize int
		wait     = backoff.Backoff{Base: backoffMin, Max: backoffMax}
	)
	defer func() {
		if stream != nil {
			_ = stream.CloseSend()
		}
	}()
	for {
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return
		}
		p.mu.Lock()
		batch, p.queue = p.queue, batch[:0]
		p.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		if stream == nil {
			var err error
			stream, err = p.client.Send(p.ctx)
			if err != nil {
				stream = nil
				p.fail(batch, err)
				if !p.sleep(&wait) {
					return
				}
				continue
			}
		}
		// Fresh envelopes and buffer per frame: gRPC allows stats handlers
		// (DialOptions) to read a sent message lazily, so it is never
		// modified after Send. One buffer, sized from the last frame, holds
		// every marshalled message.
		buf := make([]byte, 0, lastSize+lastSize/4)
		frame, envs := newFrame(p.t.n.cfg.NodeID, p.id, len(batch))
		for i, o := range batch {
			start := len(buf)
			var err error
			buf, err = proto.MarshalOptions{}.MarshalAppend(buf, o.msg)
			if err != nil {
				p.log.Error().Err(err).Msg("marshal raft message")
			}
			envs[i].Group, envs[i].Message = uint32(o.group), buf[start:len(buf):len(buf)]
		}
		lastSize = min(len(buf), 8<<20)
		err := stream.Send(frame)
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The peer ended the stream; its status (and trailer) says
				// why.
				if _, recvErr := stream.CloseAndRecv(); recvErr != nil {
					err = recvErr
				}
				p.t.n.refusedAsRemoved(stream.Trailer())
			} else {
				_ = stream.CloseSend()
			}
			stream = nil
			p.fail(batch, err)
			if !p.sleep(&wait) {
				return
			}
			continue
		}
		wait.Reset()
		if p.outage != nil {
			p.log.Info().Msg("raft peer reachable again")
			p.outage = nil
		}
		clear(batch)
	}
}

// smallFrame is how many messages a frame holds in the allocation of the
// frame itself: most frames carry a few (an append or its acknowledgement
// per group with traffic).
const smallFrame = 4

// frameBox is a frame with room for smallFrame envelopes.
type frameBox struct {
	frame raftlogpb.RaftBatch
	envs  [smallFrame]raftlogpb.RaftEnvelope
	ptrs  [smallFrame]*raftlogpb.RaftEnvelope
}

// newFrame returns a frame from one node to another with n envelopes
// (frame.Messages[i] == &envs[i]), in one allocation when n <= smallFrame.
func newFrame(from, to uint64, n int) (*raftlogpb.RaftBatch, []raftlogpb.RaftEnvelope) {
	box := &frameBox{}
	envs, ptrs := box.envs[:0], box.ptrs[:0]
	if n > smallFrame {
		envs, ptrs = make([]raftlogpb.RaftEnvelope, 0, n), make([]*raftlogpb.RaftEnvelope, 0, n)
	}
	envs, ptrs = envs[:n], ptrs[:n]
	for i := range envs {
		ptrs[i] = &envs[i]
	}
	box.frame.From, box.frame.To, box.frame.Messages = from, to, ptrs
	return &box.frame, envs
}

// fail logs why a send failed and drops its batch.
func (p *peerSender) fail(batch []outbound, err error) {
	if p.ctx.Err() != nil {
		return
	}
	if p.outage == nil {
		p.outage = make(outageCauses)
	}
	ev := p.log.Debug()
	if p.outage.first(err) {
		ev = p.log.Warn()
	}
	if reason, ok := refusedReason(err); ok {
		ev.Str("reason", reason).Msg(refusalAdvice(reason))
		p.t.n.peerRefused(p.id, reason)
	} else {
		ev.Err(err).Int("messages", len(batch)).Msg("raft peer unreachable; retrying with backoff")
	}
	p.drop(batch)
}

// drop reports every group of a lost batch as unable to reach the peer.
func (p *peerSender) drop(batch []outbound) {
	p.t.n.metrics.droppedMsgs.Add(float64(len(batch)))
	seen := make(map[GroupID]bool)
	for _, o := range batch {
		if !seen[o.group] {
			seen[o.group] = true
			p.t.n.reportUnreachable(o.group, o.msg.GetTo())
		}
		if o.msg.GetType() == pb.MsgSnap {
			p.t.n.reportSnapshot(o.group, o.msg.GetTo(), false)
		}
	}
	clear(batch)
}

// sleep waits out the backoff (with jitter), dropping what is queued in
// the meantime; false when the transport closes.
func (p *peerSender) sleep(wait *backoff.Backoff) bool {
	timer := time.NewTimer(wait.Next())
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-p.ctx.Done():
		return false
	}
	p.mu.Lock()
	dropped := p.queue
	p.queue = nil
	p.mu.Unlock()
	if len(dropped) > 0 && p.ctx.Err() == nil {
		p.log.Debug().Int("messages", len(dropped)).Msg("raft peer in backoff: messages dropped")
		p.drop(dropped)
	}
	return true
}

// sendSnapshot streams one snapshot on its own Raft.Snapshot call.
func (t *grpcTransport) sendSnapshot(group GroupID, m *pb.Message) {
	p := t.peer(NodeOf(m.GetTo()))
	if p == nil || p.client == nil || !t.n.snaps.startSend(p.id) {
		t.n.reportSnapshot(group, m.GetTo(), false)
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		err := p.streamSnapshot(group, m)
		t.n.snaps.doneSend(p.id)
		switch {
		case errors.Is(err, errSnapshotsBusy):
			p.log.Debug().Uint32("group", uint32(group)).Msg("snapshot refused by a busy peer; raft sends it again later")
		case err != nil && p.ctx.Err() == nil:
			p.log.Warn().Err(err).Uint32("group", uint32(group)).Msg("snapshot send failed")
		}
		t.n.reportSnapshot(group, m.GetTo(), err == nil)
	}()
}

func (p *peerSender) streamSnapshot(group GroupID, m *pb.Message) error {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	stream, err := p.client.Snapshot(ctx)
	if err != nil {
		return err
	}
	err = p.t.n.streamSnapshot(group, m, func(msg *pb.Message, data []byte, last bool) error {
		chunk := &raftlogpb.SnapshotChunk{Group: uint32(group), From: p.t.n.cfg.NodeID, To: p.id, Data: data, Last: last}
		if msg != nil {
			b, err := proto.Marshal(msg)
			if err != nil {
				return err
			}
			chunk.Message = b
		}
		return stream.Send(chunk)
	})
	if err != nil {
		return err
	}
	ack, err := stream.CloseAndRecv()
	p.t.n.refusedAsRemoved(stream.Trailer())
	if err != nil {
		return err
	}
	if !ack.GetOk() {
		if ack.GetError() == errSnapshotsBusy.Error() {
			return errSnapshotsBusy
		}
		return fmt.Errorf("raftlog: peer refused snapshot: %s", ack.GetError())
	}
	return nil
}

func (t *grpcTransport) close() {
	t.mu.Lock()
	t.cancel()
	t.mu.Unlock()
	t.wg.Wait()
	for _, p := range t.peers {
		if p.conn != nil {
			_ = p.conn.Close()
		}
	}
}
