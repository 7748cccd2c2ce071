package raftlog

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/raftgate/raftgate/raftlog/wal"
)

// logStore is a group's raft.Storage: a view of the group's log in the
// node's write-ahead log, plus the compaction point and configuration. Only
// the group's goroutine touches its fields. The log writer appends to the
// WAL concurrently, but only at indexes raft still holds in its unstable
// log (raft reads Storage only below that), so what raft reads here never
// changes under it.
type logStore struct {
	wal   *wal.WAL
	group uint32

	hard *pb.HardState
	conf *pb.ConfState
	// compactIndex: entries <= compactIndex are no longer served (raft
	// sends a snapshot instead); the WAL releases them once the state
	// checkpoint passed them too.
	compactIndex uint64
	compactTerm  uint64
}

var _ raft.Storage = (*logStore)(nil)

// InitialState implements raft.Storage.
func (s *logStore) InitialState() (*pb.HardState, *pb.ConfState, error) {
	return s.hard, s.conf, nil
}

// Entries implements raft.Storage.
func (s *logStore) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	if lo <= s.compactIndex {
		return nil, raft.ErrCompacted
	}
	return s.wal.Entries(s.group, lo, hi, maxSize)
}

// Term implements raft.Storage.
func (s *logStore) Term(i uint64) (uint64, error) {
	switch {
	case i == s.compactIndex:
		return s.compactTerm, nil
	case i < s.compactIndex:
		return 0, raft.ErrCompacted
	}
	return s.wal.Term(s.group, i)
}

// LastIndex implements raft.Storage.
func (s *logStore) LastIndex() (uint64, error) {
	return max(s.wal.LastIndex(s.group), s.compactIndex), nil
}

// FirstIndex implements raft.Storage.
func (s *logStore) FirstIndex() (uint64, error) { return s.compactIndex + 1, nil }

// Snapshot implements raft.Storage. It carries only metadata: the state is
// read from the last checkpoint of state.db when the snapshot is streamed
// (see snapshot.go), at the applied index stored there, which is never
// behind the compaction point.
func (s *logStore) Snapshot() (*pb.Snapshot, error) {
	return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index: new(s.compactIndex), Term: new(s.compactTerm), ConfState: s.conf,
	}}, nil
}

// compacted moves the compaction point forward.
func (s *logStore) compacted(index, term uint64) {
	if index > s.compactIndex {
		s.compactIndex, s.compactTerm = index, term
	}
}

// restored records an installed snapshot: the log is empty after it.
func (s *logStore) restored(meta *pb.SnapshotMetadata) {
	s.compactIndex, s.compactTerm = meta.GetIndex(), meta.GetTerm()
	if meta.GetConfState() != nil {
		s.conf = meta.GetConfState()
	}
}

func (s *logStore) setHardState(hs *pb.HardState) {
	if !raft.IsEmptyHardState(hs) {
		s.hard = hs
	}
}
