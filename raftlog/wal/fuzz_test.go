package wal

import (
	"os"
	"testing"

	"github.com/rs/zerolog"
	raftpb "go.etcd.io/raft/v3/raftpb"
)

// FuzzReplay feeds arbitrary payloads, sealed in a valid frame, to Open:
// it may refuse them, but must not panic, and what it accepts must read
// back without panicking.
func FuzzReplay(f *testing.F) {
	var b Batch
	b.Append(1, []*raftpb.Entry{ent(1, 1, "a"), ent(2, 1, ""), ent(3, 2, "ccc")})
	b.SetHardState(1, hardState(2, 1, 3))
	b.SetFirstIndex(2, 10, 3)
	b.Append(2, []*raftpb.Entry{ent(11, 3, "x")})
	b.DropGroup(3)
	f.Add(b.buf[frameHeaderLen:])
	f.Add([]byte{opStateBegin, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) == 0 || len(payload) > 1<<16 {
			return
		}
		dir := t.TempDir()
		seg := make([]byte, segHeaderSize, 8192)
		encodeSegmentHeader(seg, 1)
		start := len(seg)
		seg = append(seg, make([]byte, frameHeaderLen)...)
		seg = append(seg, payload...)
		seg = padFrame(seg, start)
		sealFrame(seg[start:], len(payload), 1, segHeaderSize)
		if err := os.WriteFile(dir+"/"+segmentName(1), seg, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := Open(Options{Dir: dir, SegmentSize: 8192, FS: NewCrashFS(), Logger: zerolog.Nop()})
		if err != nil {
			return
		}
		defer w.Close()
		for _, g := range w.Groups() {
			w.HardState(g)
			first, last := w.FirstIndex(g), w.LastIndex(g)
			w.Term(g, first-1)
			if last >= first && last-first < 1<<20 {
				w.Entries(g, first, last+1, 1<<30)
			}
		}
	})
}
