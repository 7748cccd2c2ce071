package raftlog

import (
	"errors"
	"io"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/rpc"
)

// raftServer is the inbound half of the gRPC transport.
type raftServer struct {
	rpc.UnimplementedRaftServer
	n *Node
}

func (s *raftServer) register(r grpc.ServiceRegistrar) { rpc.RegisterRaftServer(r, s) }

var errRefused = errors.New("raftlog: message refused")

// accept checks the sender and addressee of an inbound message: a batch or
// message addressed to another node, or from a node that is not a voter,
// is logged and dropped.
func (s *raftServer) accept(from, to uint64) bool {
	if to != s.n.cfg.NodeID || !s.n.isPeer(from) {
		s.n.log.Warn().Uint64("from", from).Uint64("to", to).Msg("raft message refused: wrong addressee or unknown sender")
		return false
	}
	return true
}

// Send receives batches of raft messages from one peer.
func (s *raftServer) Send(stream rpc.Raft_SendServer) error {
	for {
		batch, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&rpc.RaftAck{})
		}
		if err != nil {
			return err
		}
		if s.n.isClosed() {
			return status.Error(codes.Unavailable, ErrStopped.Error())
		}
		if !s.accept(batch.GetFrom(), batch.GetTo()) {
			return status.Error(codes.PermissionDenied, errRefused.Error())
		}
		for _, env := range batch.GetMessages() {
			m := &pb.Message{}
			if err := proto.Unmarshal(env.GetMessage(), m); err != nil {
				s.n.log.Warn().Err(err).Msg("raft message undecodable")
				continue
			}
			if m.GetFrom() != batch.GetFrom() || !s.accept(m.GetFrom(), m.GetTo()) {
				continue
			}
			s.n.deliver(GroupID(env.GetGroup()), m)
		}
	}
}

// Snapshot receives one snapshot in chunks.
func (s *raftServer) Snapshot(stream rpc.Raft_SnapshotServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if s.n.isClosed() {
		return status.Error(codes.Unavailable, ErrStopped.Error())
	}
	if !s.accept(first.GetFrom(), first.GetTo()) {
		return stream.SendAndClose(&rpc.SnapshotAck{Error: errRefused.Error()})
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(first.GetMessage(), m); err != nil || m.GetFrom() != first.GetFrom() || m.GetTo() != s.n.cfg.NodeID {
		return stream.SendAndClose(&rpc.SnapshotAck{Error: "bad snapshot message"})
	}
	sink, err := s.n.newSnapshotSink(GroupID(first.GetGroup()), m)
	if err != nil {
		return stream.SendAndClose(&rpc.SnapshotAck{Error: err.Error()})
	}
	chunk := first
	for {
		if err := sink.write(chunk.GetData()); err != nil {
			sink.abort()
			return stream.SendAndClose(&rpc.SnapshotAck{Error: err.Error()})
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
		return stream.SendAndClose(&rpc.SnapshotAck{Error: err.Error()})
	}
	return stream.SendAndClose(&rpc.SnapshotAck{Ok: true})
}
