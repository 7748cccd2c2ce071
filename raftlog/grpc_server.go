package raftlog

import (
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/raftlog/raftlogpb"
)

// raftServer is the inbound half of the gRPC transport.
type raftServer struct {
	raftlogpb.UnimplementedRaftServer
	n *Node

	// refusalsMu guards refusalsLogged: the refusals already logged at
	// warn level, so that a sender refused twice a second is logged once.
	refusalsMu     sync.Mutex
	refusalsLogged map[refusal]bool
}

// refusal is one cause of refusing inbound messages.
type refusal struct {
	from, to uint64
	reason   string
}

// maxRefusalsLogged bounds refusalsLogged: senders choose the ids.
const maxRefusalsLogged = 64

func (s *raftServer) register(r grpc.ServiceRegistrar) { raftlogpb.RegisterRaftServer(r, s) }

var errRefused = errors.New("raftlog: message refused")

// Why inbound messages are refused. The sender gets the reason in the
// PermissionDenied status (see refusedReason).
const (
	refusedNotAddressee = "addressed to another node id than this node's"
	refusedNotAPeer     = "the sender is not one of this node's peers in its voters (--initial-cluster)"
)

// accept checks the sender and addressee of an inbound message: a batch or
// message addressed to another node, or from a node that is not a voter,
// is dropped and logged, at warn level once per cause. It returns why it
// refused, or "".
func (s *raftServer) accept(from, to uint64) (refused string) {
	switch {
	case to != s.n.cfg.NodeID:
		refused = refusedNotAddressee
	case !s.n.isPeer(from):
		refused = refusedNotAPeer
	default:
		return ""
	}
	r := refusal{from: from, to: to, reason: refused}
	s.refusalsMu.Lock()
	ev := s.n.log.Debug()
	if !s.refusalsLogged[r] && len(s.refusalsLogged) < maxRefusalsLogged {
		if s.refusalsLogged == nil {
			s.refusalsLogged = map[refusal]bool{}
		}
		s.refusalsLogged[r] = true
		ev = s.n.log.Warn()
	}
	s.refusalsMu.Unlock()
	ev.Uint64("from", from).Uint64("to", to).Uint64("self", s.n.cfg.NodeID).Str("reason", refused).
		Msg("raft message refused (logged once per sender and reason)")
	return refused
}

// Send receives batches of raft messages from one peer.
func (s *raftServer) Send(stream raftlogpb.Raft_SendServer) error {
	for {
		batch, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&raftlogpb.RaftAck{})
		}
		if err != nil {
			return err
		}
		if s.n.isClosed() {
			return status.Error(codes.Unavailable, ErrStopped.Error())
		}
		if refused := s.accept(batch.GetFrom(), batch.GetTo()); refused != "" {
			if s.n.isGone(batch.GetFrom()) {
				return s.refuseRemoved(stream, removedSenders(batch))
			}
			return status.Error(codes.PermissionDenied, errRefused.Error()+": "+refused)
		}
		s.n.peerAccepts(batch.GetFrom())
		var removed []string
		for _, env := range batch.GetMessages() {
			// The entries alias env's bytes: they are this batch's own copy
			// (gRPC's proto codec decodes with proto.Unmarshal, which copies
			// bytes fields out of its pooled buffer), never reused.
			m, err := decodeMessage(env.GetMessage())
			if err != nil {
				s.n.log.Warn().Err(err).Msg("raft message undecodable")
				continue
			}
			if NodeOf(m.GetFrom()) != batch.GetFrom() || s.accept(NodeOf(m.GetFrom()), NodeOf(m.GetTo())) != "" {
				continue
			}
			if s.n.deliver(GroupID(env.GetGroup()), m) == fromRemoved {
				removed = append(removed, removedValue(env.GetGroup(), m.GetFrom()))
			}
		}
		if len(removed) > 0 {
			return s.refuseRemoved(stream, removed)
		}
	}
}

// removedTrailer is the trailer key of the "removed" answer: a stream
// that carried messages of replicas the group removed (or of a node
// removed from the address book) ends with codes.FailedPrecondition and
// one "group/replica" value per such replica, so that the sender's node
// stops them (Node.refusedAsRemoved) instead of retrying forever.
const removedTrailer = "raftlog-removed"

func removedValue(group uint32, replica uint64) string {
	return strconv.FormatUint(uint64(group), 10) + "/" + strconv.FormatUint(replica, 10)
}

// removedSenders lists the replicas whose messages batch carries.
func removedSenders(batch *raftlogpb.RaftBatch) []string {
	var out []string
	for _, env := range batch.GetMessages() {
		if m, err := decodeMessage(env.GetMessage()); err == nil && NodeOf(m.GetFrom()) == batch.GetFrom() {
			if v := removedValue(env.GetGroup(), m.GetFrom()); !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// refuseRemoved ends a stream with the "removed" answer.
func (s *raftServer) refuseRemoved(stream grpc.ServerStream, removed []string) error {
	stream.SetTrailer(metadata.MD{removedTrailer: removed})
	return status.Error(codes.FailedPrecondition, ErrRemoved.Error())
}

// refusedAsRemoved reads a peer's "removed" answer (see removedTrailer).
func (n *Node) refusedAsRemoved(md metadata.MD) {
	for _, v := range md.Get(removedTrailer) {
		g, r, ok := strings.Cut(v, "/")
		group, err1 := strconv.ParseUint(g, 10, 32)
		replica, err2 := strconv.ParseUint(r, 10, 64)
		if ok && err1 == nil && err2 == nil {
			n.removedByPeer(GroupID(group), replica)
		}
	}
}

// Snapshot receives one snapshot in chunks.
func (s *raftServer) Snapshot(stream raftlogpb.Raft_SnapshotServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if s.n.isClosed() {
		return status.Error(codes.Unavailable, ErrStopped.Error())
	}
	m := &pb.Message{}
	if refused := s.accept(first.GetFrom(), first.GetTo()); refused != "" {
		if s.n.isGone(first.GetFrom()) && proto.Unmarshal(first.GetMessage(), m) == nil && NodeOf(m.GetFrom()) == first.GetFrom() {
			stream.SetTrailer(metadata.Pairs(removedTrailer, removedValue(first.GetGroup(), m.GetFrom())))
		}
		return stream.SendAndClose(&raftlogpb.SnapshotAck{Error: errRefused.Error() + ": " + refused})
	}
	if err := proto.Unmarshal(first.GetMessage(), m); err != nil || NodeOf(m.GetFrom()) != first.GetFrom() || NodeOf(m.GetTo()) != s.n.cfg.NodeID {
		return stream.SendAndClose(&raftlogpb.SnapshotAck{Error: "bad snapshot message"})
	}
	sink, err := s.n.newSnapshotSink(GroupID(first.GetGroup()), m)
	if err != nil {
		return stream.SendAndClose(&raftlogpb.SnapshotAck{Error: err.Error()})
	}
	chunk := first
	for {
		if err := sink.write(chunk.GetData()); err != nil {
			sink.abort()
			return stream.SendAndClose(&raftlogpb.SnapshotAck{Error: err.Error()})
		}
		if chunk.GetLast() {
			break
		}
		if chunk, err = stream.Recv(); err != nil {
			sink.abort()
			return err
		}
	}
	if err := sink.finish(); err != nil {
		if errors.Is(err, ErrRemoved) {
			stream.SetTrailer(metadata.Pairs(removedTrailer, removedValue(first.GetGroup(), m.GetFrom())))
		}
		return stream.SendAndClose(&raftlogpb.SnapshotAck{Error: err.Error()})
	}
	return stream.SendAndClose(&raftlogpb.SnapshotAck{Ok: true})
}
