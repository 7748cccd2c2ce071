package raftlogpb_test

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/raftlog/raftlogpb"
)

// The fuzz targets feed arbitrary bytes to the decoding of every transport
// message a node accepts from a peer: decoding must never panic, and
// whatever decodes must survive a marshal/unmarshal round trip unchanged.
// The committed corpus under testdata/fuzz/ holds valid encodings of each
// message, so `go test` checks them as ordinary tests and `go test -fuzz`
// mutates from there. (raftlog's FuzzDecodeMessage covers its own decoder
// of the raft messages inside.)

// decodeRaft decodes an envelope's raft message.
func decodeRaft(data []byte) {
	m := &pb.Message{}
	if proto.Unmarshal(data, m) == nil {
		_ = m.String()
	}
}

func raftMessage() []byte {
	u := proto.Uint64
	b, _ := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgApp.Enum(), From: u(2), To: u(1), Term: u(3), LogTerm: u(2),
		Index: u(7), Commit: u(6), Entries: []*pb.Entry{{Term: u(3), Index: u(8), Data: []byte("x")}}})
	return b
}

func FuzzRaftBatch(f *testing.F) {
	testutil.Seeds(f, &raftlogpb.RaftBatch{From: 2, To: 1, Messages: []*raftlogpb.RaftEnvelope{{Group: 1, Message: raftMessage()}, {Group: 0}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, ok := testutil.RoundTrip(t, data, func() *raftlogpb.RaftBatch { return &raftlogpb.RaftBatch{} })
		if !ok {
			return
		}
		for _, env := range b.GetMessages() {
			decodeRaft(env.GetMessage())
		}
	})
}

func FuzzRaftMessage(f *testing.F) {
	f.Add(raftMessage())
	f.Fuzz(func(t *testing.T, data []byte) { decodeRaft(data) })
}

func FuzzSnapshotChunk(f *testing.F) {
	u := proto.Uint64
	snap, _ := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgSnap.Enum(), From: u(2), To: u(1), Term: u(4),
		Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: u(10), Term: u(4), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}})
	testutil.Seeds(f, &raftlogpb.SnapshotChunk{Group: 1, From: 2, To: 1, Message: snap, Data: []byte("chunk"), Last: true})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, ok := testutil.RoundTrip(t, data, func() *raftlogpb.SnapshotChunk { return &raftlogpb.SnapshotChunk{} })
		if ok {
			decodeRaft(c.GetMessage())
		}
	})
}
