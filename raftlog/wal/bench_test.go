package wal

import (
	"fmt"
	"testing"

	"github.com/rs/zerolog"
	raftpb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkWrite measures one synced Write of a batch carrying entries
// for several groups plus their hard states, on real files. The entries
// are reused between iterations (their indexes rewritten), so the
// allocations reported are the log's own.
func BenchmarkWrite(b *testing.B) {
	for _, bc := range []struct{ groups, entries, size int }{
		{1, 1, 128},
		{4, 8, 128},
		{16, 4, 256},
	} {
		b.Run(fmt.Sprintf("groups=%d/entries=%d/bytes=%d", bc.groups, bc.entries, bc.size), func(b *testing.B) {
			benchmarkWrite(b, bc.groups, bc.entries, bc.size, true)
		})
	}
	b.Run("groups=4/entries=8/bytes=128/nosync", func(b *testing.B) { benchmarkWrite(b, 4, 8, 128, false) })
}

func benchmarkWrite(b *testing.B, groups, entries, size int, sync bool) {
	w, err := Open(Options{Dir: b.TempDir(), SegmentSize: 16 << 20, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ents := make([][]*raftpb.Entry, groups)
	for g := range ents {
		ents[g] = make([]*raftpb.Entry, entries)
		for i := range ents[g] {
			ents[g][i] = &raftpb.Entry{Index: new(uint64(0)), Term: new(uint64(1)), Data: make([]byte, size)}
		}
	}
	hs := hardState(1, 1, 0)
	var batch Batch
	next := uint64(1)
	b.SetBytes(int64(groups * entries * size))
	b.ReportAllocs()
	for b.Loop() {
		batch.Reset()
		for g := range groups {
			for i, e := range ents[g] {
				*e.Index = next + uint64(i)
			}
			batch.Append(uint32(g), ents[g])
			*hs.Commit = next
			batch.SetHardState(uint32(g), hs)
		}
		if err := w.Write(&batch, sync); err != nil {
			b.Fatal(err)
		}
		next += uint64(entries)
		if next > 1000 {
			for g := range groups {
				w.Release(uint32(g), next-1000)
			}
		}
	}
	st := w.Stats()
	if st.Syncs > 0 {
		b.ReportMetric(float64(st.SyncDuration.Nanoseconds())/float64(st.Syncs), "ns/sync")
	}
}
