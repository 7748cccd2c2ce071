package wal

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// recover rebuilds the index from the segments on disk (see doc.go,
// "Recovery") and leaves the last segment active. It returns the temporary
// files kept for recycling.
func (w *WAL) recover() ([]string, error) {
	names, err := w.fs.ReadDir(w.dir)
	if err != nil {
		return nil, fmt.Errorf("wal: read dir: %w", err)
	}
	var seqs []uint64
	var pool []string
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, segmentSuffix):
			seq, err := strconv.ParseUint(strings.TrimSuffix(name, segmentSuffix), 16, 64)
			if err != nil || len(name) != 16+len(segmentSuffix) || seq == 0 {
				return nil, fmt.Errorf("wal: %s in %s is not a segment name this log writes; refusing to start", name, w.dir)
			}
			seqs = append(seqs, seq) // ReadDir sorts, and the names are fixed width
		case strings.HasSuffix(name, tmpSuffix):
			pool = w.poolCandidate(name, pool)
		}
	}
	// Segments are retired oldest first, so any before a gap in the
	// sequence were retired already; their removal was not yet durable.
	start := len(seqs) - 1
	for start > 0 && seqs[start-1] == seqs[start]-1 {
		start--
	}
	for _, seq := range seqs[:max(start, 0)] {
		name := segmentName(seq)
		w.log.Info().Str("segment", name).Msg("wal removing a segment retired before the restart")
		if err := w.fs.Remove(w.path(name)); err != nil {
			return nil, fmt.Errorf("wal: remove retired %s: %w", name, err)
		}
	}
	if start > 0 {
		seqs = seqs[start:]
		if err := w.fs.SyncDir(w.dir); err != nil {
			return nil, fmt.Errorf("wal: sync dir: %w", err)
		}
	}
	if len(seqs) == 0 {
		return pool, w.createFirst()
	}
	var buf []byte
	var prev *segment
	var prevEnd int64
	for i, seq := range seqs {
		last := i == len(seqs)-1
		s, end, err := w.recoverSegment(seq, last, &buf)
		if err != nil {
			return nil, err
		}
		// A segment is synced whole before the next one is started, and
		// the next one's state frame says where it ended: a segment that
		// ends early lost durable records.
		if prev != nil && s.hasState && s.prevSeq == prev.seq && s.prevEnd != prevEnd {
			return nil, &CorruptError{File: w.path(prev.name), Offset: prevEnd,
				Reason: fmt.Sprintf("records end here, but the next segment says they end at %d", s.prevEnd)}
		}
		if last && w.needState && prev != nil {
			w.prevSeq, w.prevEnd = prev.seq, prevEnd
		}
		prev, prevEnd = s, end
	}
	return pool, nil
}

// poolCandidate keeps a temporary file for recycling if it is a full-size
// segment file, and removes it otherwise (a preparation cut short).
func (w *WAL) poolCandidate(name string, pool []string) []string {
	f, err := w.fs.OpenFile(w.path(name), os.O_RDONLY, 0)
	if err == nil {
		size, serr := f.Size()
		f.Close()
		if serr == nil && size == w.segSize && len(pool) < poolMax {
			return append(pool, name)
		}
	}
	if err := w.fs.Remove(w.path(name)); err != nil {
		w.log.Warn().Err(err).Str("file", name).Msg("wal remove leftover temporary file")
	}
	return pool
}

// createFirst starts an empty log with segment 1.
func (w *WAL) createFirst() error {
	p, _ := w.prepare(1, nil)
	if p.err != nil {
		return fmt.Errorf("wal: create first segment: %w", p.err)
	}
	name := segmentName(1)
	if err := w.fs.Rename(w.path(p.name), w.path(name)); err != nil {
		p.f.Close()
		return fmt.Errorf("wal: create first segment: %w", err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		p.f.Close()
		return fmt.Errorf("wal: create first segment: %w", err)
	}
	s := &segment{seq: 1, name: name, f: p.f, size: w.segSize, maxIndex: make(map[uint32]uint64)}
	w.segments = append(w.segments, s)
	w.active, w.off, w.syncedOff, w.needState = s, segHeaderSize, segHeaderSize, true
	return nil
}

// recoverSegment replays one segment into the index and returns it and
// where its records end. buf is a reusable read buffer.
func (w *WAL) recoverSegment(seq uint64, last bool, bufp *[]byte) (*segment, int64, error) {
	s, end, err := w.readSegment(seq, last, bufp)
	if err != nil {
		return nil, 0, err
	}
	return s, int64(end), nil
}

func (w *WAL) readSegment(seq uint64, last bool, bufp *[]byte) (*segment, int, error) {
	buf := *bufp
	name := segmentName(seq)
	f, err := w.fs.OpenFile(w.path(name), os.O_RDWR, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("wal: open %s: %w", name, err)
	}
	s := &segment{seq: seq, name: name, f: f, maxIndex: make(map[uint32]uint64)}
	w.segments = append(w.segments, s) // closed by Open's caller path on error
	size, err := f.Size()
	if err != nil {
		return nil, 0, fmt.Errorf("wal: stat %s: %w", name, err)
	}
	s.size = size
	if int64(cap(buf)) < size {
		buf = make([]byte, size)
		*bufp = buf
	}
	data := buf[:size]
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, 0, fmt.Errorf("wal: read %s: %w", name, err)
	}
	hseq, why := decodeSegmentHeader(data)
	if why == "" && hseq != seq {
		why = fmt.Sprintf("header says segment %d", hseq)
	}
	if why != "" {
		return nil, 0, &CorruptError{File: w.path(name), Offset: 0, Reason: why}
	}

	off := segHeaderSize
	for {
		fr, ok := validFrameAt(data, off, seq)
		if !ok {
			break
		}
		payload := data[off+frameHeaderLen : off+frameHeaderLen+fr.payloadLen]
		if err := w.replay(s, payload, int64(off+frameHeaderLen), off == segHeaderSize); err != nil {
			return nil, 0, &CorruptError{File: w.path(name), Offset: int64(off), Reason: err.Error()}
		}
		off += frameSize(fr.payloadLen)
	}
	end := off

	// What stopped the scan: the end of the data (zeros, or older bytes of
	// a recycled file), or a damaged frame of this segment.
	tornEnd, reason := end, ""
	if end+frameHeaderLen <= len(data) {
		// A torn frame of ours has our sequence number and a synced mark
		// not past itself; older bytes of a recycled file rarely pass for
		// that, and if they do, zeroing them below does no harm.
		h := readFrameHeader(data[end:])
		if (h.seq == seq && h.synced >= segHeaderSize && h.synced <= int64(end)) || validWithSeq(data, end, seq) {
			reason = "frame checksum mismatch or frame cut short"
			tornEnd = len(data)
			if h.payloadLen > 0 {
				tornEnd = min(end+frameSize(h.payloadLen), len(data))
			}
		}
	}
	// Valid frames of this segment after that point?
	var laterEnd int
	var laterSynced int64
	for q := end + frameAlign; q+frameHeaderLen <= len(data); q += frameAlign {
		if binary.LittleEndian.Uint64(data[q+8:]) != seq {
			continue
		}
		if fr, ok := validFrameAt(data, q, seq); ok {
			laterEnd = q + frameSize(fr.payloadLen)
			laterSynced = max(laterSynced, fr.synced)
		}
	}
	if !last && laterEnd > 0 {
		// A segment is synced whole before the next one exists: damage
		// here cannot be a torn write. (Damage to its very last records
		// is caught by the next segment's state frame: see recover.)
		return nil, 0, &CorruptError{File: w.path(name), Offset: int64(end), Reason: "valid records follow unreadable bytes"}
	}
	if laterSynced > int64(end) {
		// A later record was written when the bytes at end were already
		// durable: they were damaged afterwards.
		if reason == "" {
			reason = "valid records follow unreadable bytes"
		}
		return nil, 0, &CorruptError{File: w.path(name), Offset: int64(end), Reason: reason + " (bytes covered by a completed sync)"}
	}
	dropEnd := max(tornEnd, laterEnd)
	if last && dropEnd > end {
		// A torn tail: never acknowledged (see doc.go). Zero it so that a
		// shorter record written over it cannot be followed by its remains.
		if err := writeZeros(f, int64(end), int64(dropEnd)); err != nil {
			return nil, 0, fmt.Errorf("wal: repair %s: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			return nil, 0, fmt.Errorf("wal: repair %s: %w", name, err)
		}
		w.stats.tornTail.Add(int64(dropEnd - end))
		w.log.Warn().Str("file", w.path(name)).Int("offset", end).Int("bytes_dropped", dropEnd-end).
			Str("reason", reason).Msg("wal truncated a torn write at the tail of the log")
	}
	if last {
		w.active, w.off, w.syncedOff = s, int64(end), int64(end)
		w.needState = !s.hasState
	}
	return s, end, nil
}

// replay applies one frame's records to the index. first says whether the
// frame is the segment's first (where its state frame belongs).
func (w *WAL) replay(s *segment, p []byte, payloadOff int64, first bool) error {
	r := reader{b: p}
	for r.more() {
		kind, id := r.byte(), r.u32()
		switch kind {
		case opStateBegin:
			if !first {
				return fmt.Errorf("state frame not at the start of the segment")
			}
			s.hasState = true
			s.prevSeq, s.prevEnd = r.u64(), int64(r.u64())
		case opGroupState:
			base, baseTerm, last, lastTerm := r.u64(), r.u64(), r.u64(), r.u64()
			hasHS := r.byte() == 1
			term, vote, commit := r.u64(), r.u64(), r.u64()
			if r.err != nil {
				break
			}
			g := w.groupFor(id)
			if g.last() < last || g.base > last {
				// Its older entries were in segments already retired
				// (released, or dead: overwritten or reset later).
				g.reset(last, lastTerm)
			} else {
				if g.last() > last {
					g.truncateFrom(last + 1)
				}
				if base > g.base {
					g.compact(base)
				}
				if base == g.base {
					g.baseTerm = baseTerm
				}
			}
			g.hasHardState = hasHS
			g.term, g.vote, g.commit = term, vote, commit
		case opEntries:
			firstIndex, prevTerm, count := r.u64(), r.u64(), int(r.u32())
			if r.err != nil || firstIndex == 0 {
				return fmt.Errorf("group %d: bad entries record", id)
			}
			g := w.groupFor(id)
			switch {
			case firstIndex > g.last()+1:
				return fmt.Errorf("group %d: entries from %d leave a gap after its last index %d", id, firstIndex, g.last())
			case firstIndex <= g.base:
				// The entries before it were in retired segments, and a
				// state frame moved the base past them: see doc.go.
				g.reset(firstIndex-1, prevTerm)
			case g.termAt(firstIndex-1) != prevTerm:
				return fmt.Errorf("group %d: entries from %d follow term %d, the log has %d", id, firstIndex, prevTerm, g.termAt(firstIndex-1))
			case firstIndex <= g.last():
				g.truncateFrom(firstIndex)
			}
			for j := 0; j < count && r.err == nil; j++ {
				at := payloadOff + int64(r.pos)
				term, typ, dataLen := r.u64(), r.byte(), r.u32()
				r.skip(int(dataLen))
				g.locs = append(g.locs, entryLoc{term: term, seq: uint32(s.seq), off: uint32(at), size: entryFixedLen + dataLen, typ: entryType(typ)})
			}
			if count > 0 {
				s.noteIndex(id, g.last())
			}
		case opHardState:
			term, vote, commit := r.u64(), r.u64(), r.u64()
			g := w.groupFor(id)
			g.hasHardState = true
			g.term, g.vote, g.commit = term, vote, commit
		case opFirstIndex:
			index, term := r.u64(), r.u64()
			w.groupFor(id).reset(index, term)
			w.forget(id)
		case opDropGroup:
			delete(w.groups, id)
			w.forget(id)
		default:
			return fmt.Errorf("unknown record kind %d", kind)
		}
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

// reader decodes a payload, remembering the first overrun.
type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) more() bool { return r.err == nil && r.pos < len(r.b) }

// take returns the next n (at most 8) bytes.
func (r *reader) take(n int) []byte {
	if !r.skip(n) {
		return make([]byte, n)
	}
	return r.b[r.pos-n : r.pos]
}

func (r *reader) skip(n int) bool {
	if r.err == nil && n > len(r.b)-r.pos {
		r.err = fmt.Errorf("record cut short at payload byte %d", r.pos)
	}
	if r.err != nil {
		return false
	}
	r.pos += n
	return true
}

func (r *reader) byte() byte  { return r.take(1)[0] }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }
