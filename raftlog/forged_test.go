package raftlog

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/raftlog/raftlogpb"
)

// TestGRPCRefusesForgedSnapshot: a MsgSnap sent on the Send RPC whose Data
// names a file (a snapshot's Data is a spool path inside a node) is dropped
// and logged; neither the named file nor the node's own state is touched.
func TestGRPCRefusesForgedSnapshot(t *testing.T) {
	logs := &lockedLines{}
	c := newGRPCCluster(t, 3, []GroupID{1}, func(cfg *Config) {
		if cfg.NodeID == 1 {
			cfg.Logger = zerolog.New(logs).Level(zerolog.WarnLevel)
		}
	})
	lead := c.leader(t, 1, 10*time.Second)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	targets := []string{victim, filepath.Join(c.dirs[1], StateFile)}

	conn, err := grpc.NewClient(c.peers[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	term := c.nodes[lead].Group(1).leader.Load().Term
	from := uint64(2)
	if lead == 2 {
		from = 3
	}
	stream, err := raftlogpb.NewRaftClient(conn).Send(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range targets {
		m := &pb.Message{
			Type: pb.MsgSnap.Enum(), From: proto.Uint64(from), To: proto.Uint64(1), Term: proto.Uint64(term),
			Snapshot: &pb.Snapshot{Data: []byte(path), Metadata: &pb.SnapshotMetadata{
				Index: proto.Uint64(1 << 40), Term: proto.Uint64(term),
				ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}},
			}},
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&raftlogpb.RaftBatch{From: from, To: 1, Messages: []*raftlogpb.RaftEnvelope{{Group: 1, Message: b}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}

	// An entry applied on node 1 after the forged messages were handed
	// over means its loop has run past them (and past the clean-up of
	// unused spool files that deleted the named file before the fix).
	g := c.nodes[lead].Group(1)
	p, err := g.Propose(context.Background(), []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "node 1 to apply an entry proposed after the forgery", func() bool {
		return c.sms[1][1].appliedIndex() >= p.Index
	})
	for _, path := range targets {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%s named by a forged MsgSnap: %v", path, err)
		}
	}
	if n := logs.count("a snapshot arrives only on the Snapshot RPC"); n != len(targets) {
		t.Errorf("%d refusals logged, want %d", n, len(targets))
	}
}
