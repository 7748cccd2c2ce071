package raftlog

import (
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// randomMessage sets a random subset of a message's fields; with snapshot
// it may also set the fields decodeMessage leaves to proto.Unmarshal.
func randomMessage(r *rand.Rand, snapshot bool) *pb.Message {
	u := func() *uint64 {
		if r.IntN(3) == 0 {
			return nil
		}
		v := r.Uint64() >> r.IntN(64)
		return &v
	}
	m := &pb.Message{To: u(), From: u(), Term: u(), LogTerm: u(), Index: u(), Commit: u(), Vote: u(), RejectHint: u()}
	if r.IntN(2) == 0 {
		m.Type = pb.MessageType(r.IntN(len(pb.MessageType_name))).Enum()
	}
	if r.IntN(3) == 0 {
		m.Reject = proto.Bool(r.IntN(2) == 0)
	}
	if r.IntN(4) == 0 {
		m.Context = make([]byte, r.IntN(3)) // empty but present, too
	}
	for range r.IntN(5) {
		e := &pb.Entry{Term: u(), Index: u()}
		if r.IntN(2) == 0 {
			e.Type = pb.EntryType(r.IntN(len(pb.EntryType_name))).Enum()
		}
		if r.IntN(4) > 0 {
			e.Data = make([]byte, r.IntN(40))
			for i := range e.Data {
				e.Data[i] = byte(r.Uint32())
			}
		}
		m.Entries = append(m.Entries, e)
	}
	if snapshot && r.IntN(4) == 0 {
		m.Snapshot = &pb.Snapshot{Data: []byte("state"), Metadata: &pb.SnapshotMetadata{Index: u(), Term: u()}}
	}
	if snapshot && r.IntN(4) == 0 {
		m.Responses = []*pb.Message{{Type: pb.MsgAppResp.Enum(), To: u()}}
	}
	return m
}

// checkDecode compares decodeMessage with proto.Unmarshal on data.
func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	want := &pb.Message{}
	wantErr := proto.Unmarshal(data, want)
	got, err := decodeMessage(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decode %x: error %v, proto.Unmarshal's %v", data, err, wantErr)
	}
	if wantErr == nil && !proto.Equal(got, want) {
		t.Fatalf("decode %x:\n got  %v\n want %v", data, got, want)
	}
}

func TestDecodeMessageMatchesUnmarshal(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	fast := 0
	for range 3000 {
		m := randomMessage(r, true)
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		checkDecode(t, data)
		if _, ok := decodeMessageFast(data); ok {
			fast++
		} else if m.Snapshot == nil && m.Responses == nil {
			t.Fatalf("message %v left to proto.Unmarshal", m)
		}
	}
	if fast == 0 {
		t.Fatal("no message took the fast path")
	}
}

func TestDecodeMessageOddInput(t *testing.T) {
	app, err := proto.Marshal(&pb.Message{Type: pb.MsgApp.Enum(), To: proto.Uint64(2),
		Entries: []*pb.Entry{{Term: proto.Uint64(3), Index: proto.Uint64(9), Data: []byte("cmd")}}})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty":              {},
		"truncated":          app[:len(app)-1],
		"unknown field":      protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1),
		"unknown enum":       protowire.AppendVarint(protowire.AppendTag(nil, msgType, protowire.VarintType), 999),
		"unknown entry enum": protowire.AppendBytes(protowire.AppendTag(nil, msgEntries, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, entryType, protowire.VarintType), 77)),
		"wrong wire type":    protowire.AppendFixed64(protowire.AppendTag(nil, msgTerm, protowire.Fixed64Type), 5),
		"field zero":         {0x00, 0x01},
		"repeated scalar":    append(protowire.AppendVarint(protowire.AppendTag(nil, msgTerm, protowire.VarintType), 4), protowire.AppendVarint(protowire.AppendTag(nil, msgTerm, protowire.VarintType), 5)...),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) { checkDecode(t, data) })
	}
}

// TestDecodeMessageAliasesData pins the ownership contract: entry data is
// read in place, not copied, and cannot grow into the next field.
func TestDecodeMessageAliasesData(t *testing.T) {
	data, err := proto.Marshal(&pb.Message{Entries: []*pb.Entry{{Data: []byte("ab")}, {Data: []byte("cd")}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMessage(data)
	if err != nil {
		t.Fatal(err)
	}
	d := m.Entries[0].Data
	if cap(d) != len(d) {
		t.Fatalf("entry data cap %d, len %d: an append would overwrite the next field", cap(d), len(d))
	}
	d[0] = 'x'
	if data[4] != 'x' {
		t.Fatal("entry data was copied")
	}
}

func TestDecodeMessageAllocs(t *testing.T) {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Term: proto.Uint64(3),
		LogTerm: proto.Uint64(3), Index: proto.Uint64(10), Commit: proto.Uint64(9)}
	for i := range 8 {
		m.Entries = append(m.Entries, &pb.Entry{Term: proto.Uint64(3), Index: proto.Uint64(uint64(11 + i)), Data: make([]byte, 100)})
	}
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := decodeMessage(data); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Fatalf("decoding a MsgApp of 8 entries took %.0f allocations, want 3", allocs)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		data, err := proto.Marshal(randomMessage(r, true))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, data) })
}
