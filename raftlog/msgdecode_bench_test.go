package raftlog

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkDecodeMessage decodes what a peer's stream carries most, a
// MsgApp of 8 entries and a heartbeat, with decodeMessage and with
// proto.Unmarshal. raftpb.Message is go.etcd.io/raft's generated type, so
// no generator of ours (vtprotobuf) can give it methods: these are the two
// choices. Compare with benchstat -col /impl.
func BenchmarkDecodeMessage(b *testing.B) {
	u := proto.Uint64
	app := &pb.Message{Type: pb.MsgApp.Enum(), To: u(2), From: u(1), Term: u(3), LogTerm: u(3), Index: u(10), Commit: u(9)}
	for i := range 8 {
		app.Entries = append(app.Entries, &pb.Entry{Term: u(3), Index: u(uint64(11 + i)), Data: make([]byte, 100)})
	}
	heartbeat := &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: u(2), From: u(1), Term: u(3), Commit: u(9)}
	impls := []struct {
		name   string
		decode func([]byte) error
	}{
		{"hand", func(d []byte) error { _, err := decodeMessage(d); return err }},
		{"proto", func(d []byte) error { return proto.Unmarshal(d, &pb.Message{}) }},
	}
	for _, msg := range []struct {
		name string
		m    *pb.Message
	}{{"msgapp=8", app}, {"heartbeat", heartbeat}} {
		data, err := proto.Marshal(msg.m)
		if err != nil {
			b.Fatal(err)
		}
		for _, impl := range impls {
			b.Run(msg.name+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := impl.decode(data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
