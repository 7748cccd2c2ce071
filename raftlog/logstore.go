package raftlog

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// logStore is a group's raft.Storage. Only the group's goroutine touches it
// (raft calls it from Step/Ready, the loop updates it when a write became
// durable), so it needs no lock. It reflects only what is durable: the
// writer goroutine writes bbolt, and the loop folds the result in here
// before it tells raft the write finished (MsgStorageAppendResp), which is
// when raft starts reading those entries from Storage.
//
// The hot tail of the log lives in cache (bounded by cacheLimit bytes), so
// replication to followers that keep up never reads bbolt.
type logStore struct {
	db     *bolt.DB
	bucket []byte

	hard      *pb.HardState
	conf      *pb.ConfState
	snapIndex uint64 // entries <= snapIndex are compacted
	snapTerm  uint64
	lastIndex uint64

	cache      []*pb.Entry // contiguous, ends at lastIndex when non-empty
	cacheBytes uint64
	cacheLimit uint64
}

var _ raft.Storage = (*logStore)(nil)

func newLogStore(db *bolt.DB, id GroupID, pg persistedGroup, cacheLimit uint64) *logStore {
	return &logStore{
		db: db, bucket: groupBucketName(id),
		hard: pg.hard, conf: pg.conf,
		snapIndex: pg.snapIndex, snapTerm: pg.snapTerm, lastIndex: pg.lastIndex,
		cacheLimit: cacheLimit,
	}
}

// InitialState implements raft.Storage.
func (s *logStore) InitialState() (*pb.HardState, *pb.ConfState, error) {
	return s.hard, s.conf, nil
}

func (s *logStore) cacheFirst() uint64 {
	if len(s.cache) == 0 {
		return s.lastIndex + 1
	}
	return s.cache[0].GetIndex()
}

// Entries implements raft.Storage.
func (s *logStore) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	if lo <= s.snapIndex {
		return nil, raft.ErrCompacted
	}
	if hi > s.lastIndex+1 {
		return nil, fmt.Errorf("raftlog: entries [%d,%d) beyond last index %d: %w", lo, hi, s.lastIndex, raft.ErrUnavailable)
	}
	if lo >= hi {
		return nil, nil
	}
	var out []*pb.Entry
	var size uint64
	full := func(e *pb.Entry) bool {
		size += entrySize(e)
		return len(out) > 0 && size > maxSize
	}
	cf := s.cacheFirst()
	if lo < cf {
		err := s.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket(s.bucket).Bucket(bucketLog)
			c := b.Cursor()
			var key [8]byte
			for k, v := c.Seek(indexKey(key[:], lo)); k != nil; k, v = c.Next() {
				idx := binary.BigEndian.Uint64(k)
				if idx >= hi || idx >= cf {
					break
				}
				if want := lo + uint64(len(out)); idx != want {
					return fmt.Errorf("raftlog: log gap at %d (found %d): %w", want, idx, raft.ErrUnavailable)
				}
				e, err := decodeEntry(idx, v)
				if err != nil {
					return err
				}
				if full(e) {
					return errFull
				}
				out = append(out, e)
			}
			return nil
		})
		if err == errFull {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if lo+uint64(len(out)) < min(hi, cf) {
			return nil, raft.ErrUnavailable
		}
	}
	for i := max(lo, cf); i < hi; i++ {
		e := s.cache[i-cf]
		if full(e) {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

// errFull stops a bbolt scan once maxSize is reached.
var errFull = fmt.Errorf("raftlog: size limit")

func entrySize(e *pb.Entry) uint64 { return uint64(len(e.GetData())) + 24 }

// Term implements raft.Storage.
func (s *logStore) Term(i uint64) (uint64, error) {
	switch {
	case i == s.snapIndex:
		return s.snapTerm, nil
	case i < s.snapIndex:
		return 0, raft.ErrCompacted
	case i > s.lastIndex:
		return 0, raft.ErrUnavailable
	}
	if cf := s.cacheFirst(); i >= cf {
		return s.cache[i-cf].GetTerm(), nil
	}
	var term uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		var key [8]byte
		v := tx.Bucket(s.bucket).Bucket(bucketLog).Get(indexKey(key[:], i))
		if v == nil {
			return raft.ErrUnavailable
		}
		var err error
		term, err = decodeTerm(i, v)
		return err
	})
	return term, err
}

// LastIndex implements raft.Storage.
func (s *logStore) LastIndex() (uint64, error) { return s.lastIndex, nil }

// FirstIndex implements raft.Storage.
func (s *logStore) FirstIndex() (uint64, error) { return s.snapIndex + 1, nil }

// Snapshot implements raft.Storage. It carries only metadata: the state is
// read from the state bucket when the snapshot is streamed (see
// snapshot.go), at whatever applied index that read transaction sees.
func (s *logStore) Snapshot() (*pb.Snapshot, error) {
	return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index: new(s.snapIndex), Term: new(s.snapTerm), ConfState: s.conf,
	}}, nil
}

// appended folds a durable append into the store: entries at or after the
// first new index are replaced.
func (s *logStore) appended(ents []*pb.Entry) {
	if len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	if first <= s.lastIndex {
		cf := s.cacheFirst()
		if first <= cf {
			s.cache, s.cacheBytes = nil, 0
		} else {
			for _, e := range s.cache[first-cf:] {
				s.cacheBytes -= entrySize(e)
			}
			s.cache = s.cache[: first-cf : first-cf]
		}
	}
	if len(s.cache) == 0 || first == s.lastIndex+1 || first <= s.lastIndex {
		s.cache = append(s.cache, ents...)
		for _, e := range ents {
			s.cacheBytes += entrySize(e)
		}
	}
	s.lastIndex = ents[len(ents)-1].GetIndex()
	s.evict(s.cacheLimit)
}

// evict drops cached entries from the front until the cache fits limit.
func (s *logStore) evict(limit uint64) {
	n := 0
	for n < len(s.cache) && s.cacheBytes > limit {
		s.cacheBytes -= entrySize(s.cache[n])
		s.cache[n] = nil
		n++
	}
	if n > 0 {
		// Copy so the dropped prefix's backing array can be collected.
		s.cache = append([]*pb.Entry(nil), s.cache[n:]...)
	}
}

// compacted records that entries <= index are gone from bbolt.
func (s *logStore) compacted(index, term uint64) {
	if index <= s.snapIndex {
		return
	}
	s.snapIndex, s.snapTerm = index, term
	if cf := s.cacheFirst(); len(s.cache) > 0 && index >= cf {
		n := min(index-cf+1, uint64(len(s.cache)))
		for _, e := range s.cache[:n] {
			s.cacheBytes -= entrySize(e)
		}
		s.cache = append([]*pb.Entry(nil), s.cache[n:]...)
	}
}

// restored records an installed snapshot: the log is empty after it.
func (s *logStore) restored(meta *pb.SnapshotMetadata) {
	s.snapIndex, s.snapTerm = meta.GetIndex(), meta.GetTerm()
	s.lastIndex = s.snapIndex
	if meta.GetConfState() != nil {
		s.conf = meta.GetConfState()
	}
	s.cache, s.cacheBytes = nil, 0
}

func (s *logStore) setHardState(hs *pb.HardState) {
	if !raft.IsEmptyHardState(hs) {
		s.hard = hs
	}
}
