package raftlog

import (
	pb "go.etcd.io/raft/v3/raftpb"
)

// transport carries raft messages to peers. Its inbound half calls
// Node.deliver, and newSnapshotSink for snapshots. The gRPC implementation
// is the real one; tests swap in an in-memory network with faults.
//
// Neither method blocks the group's goroutine: messages are queued per peer
// (bounded) and a lost message is reported with Node.reportUnreachable.
// The transport must not modify the messages (raft shares their entries
// with its log).
type transport interface {
	// send queues messages of one group; each names its peer in To.
	send(group GroupID, msgs []*pb.Message)
	// sendSnapshot streams the snapshot of MsgSnap m (see snapshot.go) and
	// reports the outcome with Node.reportSnapshot.
	sendSnapshot(group GroupID, m *pb.Message)
	// setPeer sends to node id at addr from now on (a new peer, or a new
	// address); removePeer stops sending to it.
	setPeer(id uint64, addr string)
	removePeer(id uint64)
	// close stops sending and waits for the transport's goroutines.
	close()
}
