package raftlog

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func testEntries(first, last, term uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := first; i <= last; i++ {
		out = append(out, &pb.Entry{Index: new(i), Term: new(term), Data: []byte(fmt.Sprintf("t%d-i%d", term, i))})
	}
	return out
}

// TestLogStoreAppendTruncateCompactReopen drives the storage the way the
// writer and the loop do, with a cache too small to hold the log, so reads
// cross from bbolt into the cache.
func TestLogStoreAppendTruncateCompactReopen(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "raft.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pg, _, err := ensureGroup(db, 7, []uint64{1})
	if err != nil {
		t.Fatal(err)
	}
	s := newLogStore(db, 7, pg, 3*entrySize(testEntries(2, 2, 1)[0]))
	w := &writer{}
	appendDurably := func(ents []*pb.Entry) {
		t.Helper()
		err := db.Update(func(tx *bolt.Tx) error {
			gb, err := openGroupBuckets(tx, 7)
			if err != nil {
				return err
			}
			return w.appendEntries(gb, ents)
		})
		if err != nil {
			t.Fatal(err)
		}
		s.appended(ents)
	}
	check := func(lo, hi uint64, wantTerm func(uint64) uint64) {
		t.Helper()
		got, err := s.Entries(lo, hi, 1<<30)
		if err != nil {
			t.Fatalf("Entries(%d,%d): %v", lo, hi, err)
		}
		if uint64(len(got)) != hi-lo {
			t.Fatalf("Entries(%d,%d) returned %d entries", lo, hi, len(got))
		}
		for k, e := range got {
			i := lo + uint64(k)
			want := fmt.Sprintf("t%d-i%d", wantTerm(i), i)
			if e.GetIndex() != i || string(e.GetData()) != want {
				t.Fatalf("entry %d = (%d, %q), want %q", i, e.GetIndex(), e.GetData(), want)
			}
			if term, err := s.Term(i); err != nil || term != wantTerm(i) {
				t.Fatalf("Term(%d) = %d, %v", i, term, err)
			}
		}
	}

	if first, _ := s.FirstIndex(); first != initialIndex+1 {
		t.Fatalf("fresh FirstIndex = %d", first)
	}
	appendDurably(testEntries(2, 21, 1))
	if last, _ := s.LastIndex(); last != 21 {
		t.Fatalf("LastIndex = %d", last)
	}
	if len(s.cache) > 3 {
		t.Fatalf("cache holds %d entries, limit is 3", len(s.cache))
	}
	check(2, 22, func(uint64) uint64 { return 1 })
	if got, _ := s.Entries(2, 22, 1); len(got) != 1 {
		t.Fatalf("maxSize 1 returned %d entries, want exactly 1", len(got))
	}

	// A new leader's entries replace the tail from index 15.
	appendDurably(testEntries(15, 17, 2))
	term := func(i uint64) uint64 {
		if i >= 15 {
			return 2
		}
		return 1
	}
	if last, _ := s.LastIndex(); last != 17 {
		t.Fatalf("LastIndex after truncation = %d", last)
	}
	check(2, 18, term)

	// Compaction up to 10.
	tm, _ := s.Term(10)
	err = db.Update(func(tx *bolt.Tx) error {
		gb, err := openGroupBuckets(tx, 7)
		if err != nil {
			return err
		}
		return compactLog(gb, &compaction{index: 10, term: tm})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.compacted(10, tm)
	if _, err := s.Entries(5, 12, 1<<30); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Entries below compaction: %v", err)
	}
	if _, err := s.Term(9); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Term below compaction: %v", err)
	}
	check(11, 18, term)
	if snap, _ := s.Snapshot(); snap.GetMetadata().GetIndex() != 10 || snap.GetMetadata().GetTerm() != 1 {
		t.Fatalf("snapshot metadata %v", snap.GetMetadata())
	}
	// A stale compaction (planned before the point moved to 10, e.g. by a
	// snapshot install) leaves the point alone: the reopen below still
	// starts at 11.
	err = db.Update(func(tx *bolt.Tx) error {
		gb, err := openGroupBuckets(tx, 7)
		if err != nil {
			return err
		}
		return compactLog(gb, &compaction{index: 6, term: 1})
	})
	if err != nil {
		t.Fatal(err)
	}

	// Reopen from disk: same log.
	pg, _, err = ensureGroup(db, 7, []uint64{1})
	if err != nil {
		t.Fatal(err)
	}
	s = newLogStore(db, 7, pg, 1<<20)
	if first, _ := s.FirstIndex(); first != 11 {
		t.Fatalf("reopened FirstIndex = %d", first)
	}
	if last, _ := s.LastIndex(); last != 17 {
		t.Fatalf("reopened LastIndex = %d", last)
	}
	check(11, 18, term)
}
