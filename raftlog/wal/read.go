package wal

import (
	"encoding/binary"
	"fmt"
	"sort"

	"go.etcd.io/raft/v3"
	raftpb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Release tells the log that group g no longer needs entries <= index (its
// state checkpoint and its raft compaction point passed them). They are
// forgotten from memory: FirstIndex(g) becomes index+1 and Term(index)
// still answers. Segments whose every entry of every group is released are
// then deleted or recycled by the segment manager (directory fsynced). It
// writes no record: after a restart the caller releases again from its
// checkpoint. An index beyond the last entry is taken as the last entry.
func (w *WAL) Release(g uint32, index uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gr := w.groups[g]
	if gr == nil {
		return
	}
	index = min(index, gr.last())
	if index <= gr.base {
		return
	}
	gr.compact(index)
	w.collectRetired()
}

// collectRetired moves the oldest segments whose entries are all released
// to the retired list (w.mu held). A segment goes only once the segment
// after it holds a durable state frame, which restates what it might have
// been the last to say (hard states, first-index points).
func (w *WAL) collectRetired() {
	n := 0
	for n+1 < len(w.segments) && w.segments[n+1].hasState && w.released(w.segments[n]) {
		n++
	}
	if n == 0 {
		return
	}
	w.retired = append(w.retired, w.segments[:n]...)
	w.segments = append(w.segments[:0:0], w.segments[n:]...)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *WAL) released(s *segment) bool {
	for id, max := range s.maxIndex {
		if g := w.groups[id]; g != nil && max > g.base {
			return false
		}
	}
	return true
}

// FirstIndex returns the first available entry index of group g (1 for a
// group the log does not know).
func (w *WAL) FirstIndex(g uint32) uint64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if gr := w.groups[g]; gr != nil {
		return gr.base + 1
	}
	return 1
}

// LastIndex returns the last entry index of group g (FirstIndex-1 when its
// log is empty).
func (w *WAL) LastIndex(g uint32) uint64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if gr := w.groups[g]; gr != nil {
		return gr.last()
	}
	return 0
}

// Term returns the term of entry i of group g, for FirstIndex-1 <= i <=
// LastIndex; raft.ErrCompacted below, raft.ErrUnavailable above.
func (w *WAL) Term(g uint32, i uint64) (uint64, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	gr := w.groups[g]
	if gr == nil {
		gr = &group{}
	}
	switch {
	case i < gr.base:
		return 0, raft.ErrCompacted
	case i > gr.last():
		return 0, raft.ErrUnavailable
	}
	return gr.termAt(i), nil
}

// HardState returns a copy of group g's latest hard state (empty if none).
func (w *WAL) HardState(g uint32) *raftpb.HardState {
	w.mu.RLock()
	defer w.mu.RUnlock()
	gr := w.groups[g]
	if gr == nil || !gr.hasHardState {
		return &raftpb.HardState{}
	}
	return &raftpb.HardState{Term: new(gr.term), Vote: new(gr.vote), Commit: new(gr.commit)}
}

// Entries returns the entries [lo, hi) of group g, limited to maxSize
// bytes (proto size) but at least one: raft.Storage's rule. Recent entries
// come from the tail cache, older ones are read by offset. raft.ErrCompacted
// if lo is below FirstIndex, raft.ErrUnavailable if hi is beyond
// LastIndex+1.
func (w *WAL) Entries(g uint32, lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	w.mu.RLock()
	gr := w.groups[g]
	if gr == nil {
		gr = &group{}
	}
	if lo <= gr.base {
		w.mu.RUnlock()
		return nil, raft.ErrCompacted
	}
	if hi > gr.last()+1 {
		w.mu.RUnlock()
		return nil, raft.ErrUnavailable
	}
	if lo >= hi {
		w.mu.RUnlock()
		return nil, nil
	}
	var (
		size  uint64
		n     int
		locs  []entryLoc
		segs  []*segment
		ents  []*raftpb.Entry
		full  bool
		cache = gr.cacheFirst()
	)
	for i := lo; i < hi && i < cache; i++ {
		l := gr.locs[i-gr.base-1]
		size += diskEntrySize(l, i)
		if n > 0 && size > maxSize {
			full = true
			break
		}
		locs = append(locs, l)
		if len(segs) == 0 || uint32(segs[len(segs)-1].seq) != l.seq {
			s := w.segmentFor(l.seq)
			if s == nil {
				w.mu.RUnlock()
				return nil, fmt.Errorf("wal: group %d entry %d: segment %d is gone", g, i, l.seq)
			}
			segs = append(segs, s)
		}
		n++
	}
	if !full {
		for i := max(lo, cache); i < hi; i++ {
			e := gr.cache[i-cache]
			size += uint64(proto.Size(e))
			if n > 0 && size > maxSize {
				break
			}
			ents = append(ents, e)
			n++
		}
	}
	w.mu.RUnlock()
	if len(locs) == 0 {
		return ents, nil
	}
	disk, err := readEntries(locs, segs, lo)
	if err != nil {
		return nil, err
	}
	return append(disk, ents...), nil
}

// segmentFor finds the live segment with the given sequence number (w.mu
// held); nil if it is gone.
func (w *WAL) segmentFor(seq uint32) *segment {
	i := sort.Search(len(w.segments), func(i int) bool { return uint32(w.segments[i].seq) >= seq })
	if i < len(w.segments) && uint32(w.segments[i].seq) == seq {
		return w.segments[i]
	}
	return nil
}

// diskEntrySize is proto.Size of the entry readEntries builds for l.
func diskEntrySize(l entryLoc, index uint64) uint64 {
	n := 1 + protowire.SizeVarint(l.term) + 1 + protowire.SizeVarint(index)
	if l.typ != raftpb.EntryNormal {
		n += 1 + protowire.SizeVarint(uint64(l.typ))
	}
	if dataLen := int(l.size) - entryFixedLen; dataLen > 0 {
		n += 1 + protowire.SizeVarint(uint64(dataLen)) + dataLen
	}
	return uint64(n)
}

// diskEntry holds an entry read from disk and the values its pointer
// fields point at, so that one allocation serves them all.
type diskEntry struct {
	e           raftpb.Entry
	term, index uint64
	typ         raftpb.EntryType
}

// readEntries preads the entries at locs (consecutive indexes from lo),
// one read per run of adjacent encodings in a segment.
func readEntries(locs []entryLoc, segs []*segment, lo uint64) ([]*raftpb.Entry, error) {
	total := 0
	for _, l := range locs {
		total += int(l.size)
	}
	buf := make([]byte, total)
	pos, si := 0, 0
	for i := 0; i < len(locs); {
		j := i + 1
		for j < len(locs) && locs[j].seq == locs[i].seq && locs[j].off == locs[j-1].off+locs[j-1].size {
			j++
		}
		for uint32(segs[si].seq) != locs[i].seq {
			si++
		}
		n := int(locs[j-1].off + locs[j-1].size - locs[i].off)
		if err := segs[si].readAt(buf[pos:pos+n], int64(locs[i].off)); err != nil {
			return nil, err
		}
		pos += n
		i = j
	}
	des := make([]diskEntry, len(locs))
	out := make([]*raftpb.Entry, len(locs))
	pos = 0
	for i, l := range locs {
		b := buf[pos : pos+int(l.size)]
		pos += int(l.size)
		d := &des[i]
		d.term = binary.LittleEndian.Uint64(b)
		d.index = lo + uint64(i)
		d.typ = raftpb.EntryType(b[8])
		d.e.Term, d.e.Index = &d.term, &d.index
		if d.typ != raftpb.EntryNormal {
			d.e.Type = &d.typ
		}
		if dataLen := binary.LittleEndian.Uint32(b[9:]); dataLen > 0 {
			d.e.Data = b[entryFixedLen : entryFixedLen+int(dataLen) : entryFixedLen+int(dataLen)]
		}
		if d.term != l.term {
			return nil, fmt.Errorf("wal: entry %d read back with term %d, index says %d", d.index, d.term, l.term)
		}
		out[i] = &d.e
	}
	return out, nil
}

// readAt reads from the segment unless it was retired meanwhile.
func (s *segment) readAt(p []byte, off int64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.f == nil {
		return raft.ErrCompacted
	}
	if _, err := s.f.ReadAt(p, off); err != nil {
		return fmt.Errorf("wal: read %s at %d: %w", s.name, off, err)
	}
	return nil
}
