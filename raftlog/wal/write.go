package wal

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// Write makes the batch durable: ONE write(2) of all its records, appended
// to the active segment (cutting over to the next segment first if it does
// not fit) and, when sync is true, ONE fdatasync. Only after Write returns
// may the caller acknowledge anything in the batch. A batch that breaks a
// rule (a gap, an append below the first index) is refused before anything
// is written and leaves the log usable. After a write or sync error the
// WAL is broken: every later Write returns the same error, so no hole can
// follow a lost write. The first batch in a new segment is always synced
// (its state frame must be durable before older segments can go).
//
// Write may be called from one goroutine at a time; the read methods are
// safe concurrently with it. The batch may be Reset and reused once Write
// returns.
func (w *WAL) Write(b *Batch, sync bool) error {
	if w.broken != nil {
		return w.broken
	}
	if b.err != nil {
		return b.err
	}
	if len(b.ops) == 0 {
		if sync && w.dirty {
			return w.sync()
		}
		return nil
	}
	if err := w.validate(b); err != nil {
		return err
	}
	payloadLen := len(b.buf) - frameHeaderLen
	if payloadLen > maxBatchPayload {
		return fmt.Errorf("wal: batch of %d bytes is larger than the limit of %d", payloadLen, maxBatchPayload)
	}
	b.buf = padFrame(b.buf, 0)

	stateLen := 0
	if w.needState {
		w.stateBuf = w.encodeState(w.stateBuf[:0])
		stateLen = len(w.stateBuf)
	}
	if w.off+int64(stateLen+len(b.buf)) > w.segSize && w.off > segHeaderSize {
		if err := w.cutOver(); err != nil {
			return w.fail(err)
		}
		w.stateBuf = w.encodeState(w.stateBuf[:0])
		stateLen = len(w.stateBuf)
	}

	seq := w.active.seq
	sealFrame(b.buf, payloadLen, seq, w.syncedOff)
	out := b.buf
	wroteState := w.needState
	if wroteState {
		sealFrame(w.stateBuf, stateLenPayload(w.stateBuf), seq, w.syncedOff)
		w.writeBuf = append(append(w.writeBuf[:0], w.stateBuf...), b.buf...)
		out = w.writeBuf
		sync = true
	}
	frameOff := w.off + int64(stateLen)

	if w.knobs.BeforeWrite != nil {
		w.knobs.BeforeWrite()
	}
	if _, err := w.active.f.WriteAt(out, w.off); err != nil {
		return w.fail(fmt.Errorf("write %s at %d: %w", w.active.name, w.off, err))
	}
	w.dirty = true
	w.off += int64(len(out))
	w.stats.writes.Add(1)
	w.stats.bytesWritten.Add(uint64(len(out)))
	if w.knobs.AfterWrite != nil {
		w.knobs.AfterWrite()
	}
	if sync {
		if err := w.sync(); err != nil {
			return err
		}
		if w.knobs.AfterSync != nil {
			w.knobs.AfterSync()
		}
	}

	w.mu.Lock()
	forgot := w.apply(b, seq, frameOff)
	if w.off > w.active.size {
		w.active.size = w.off
	}
	if wroteState {
		w.active.hasState = true
		w.needState = false
	}
	if forgot || wroteState {
		w.collectRetired()
	}
	w.mu.Unlock()
	return nil
}

// stateLenPayload is the payload length of the unsealed frame in b.
func stateLenPayload(b []byte) int { return int(binary.LittleEndian.Uint32(b[4:])) }

func (w *WAL) fail(err error) error {
	w.broken = fmt.Errorf("wal: broken by an earlier failure, nothing more can be written: %w", err)
	return w.broken
}

// sync fdatasyncs the active segment.
func (w *WAL) sync() error {
	start := time.Now()
	if err := w.active.f.Sync(); err != nil {
		return w.fail(fmt.Errorf("fdatasync %s: %w", w.active.name, err))
	}
	w.stats.syncs.Add(1)
	w.stats.syncNanos.Add(uint64(time.Since(start)))
	w.syncedOff = w.off
	w.dirty = false
	return nil
}

// validate checks the batch's appends against the groups' logs, as they
// will be when each record is reached, and fills in each append's term of
// the entry before it.
func (w *WAL) validate(b *Batch) error {
	clear(w.sim)
	w.mu.RLock()
	defer w.mu.RUnlock()
	for i := range b.ops {
		op := &b.ops[i]
		s, ok := w.sim[op.group]
		if !ok {
			s = simGroup{lastOp: -1}
			if g := w.groups[op.group]; g != nil {
				s.base, s.last = g.base, g.last()
			}
		}
		op.prevSame = s.lastOp
		switch op.kind {
		case opEntries:
			if op.a <= s.base {
				return fmt.Errorf("wal: group %d: append at index %d, at or below the first index %d", op.group, op.a, s.base+1)
			}
			if op.a > s.last+1 {
				return fmt.Errorf("wal: group %d: append at index %d leaves a gap after the last index %d", op.group, op.a, s.last)
			}
			binary.LittleEndian.PutUint64(b.buf[op.prevTermAt:], w.termBefore(b, i))
			s.last = op.a + uint64(len(op.ents)) - 1
		case opFirstIndex:
			s.base, s.last = op.a, op.a
		case opDropGroup:
			s.base, s.last = 0, 0
		}
		s.lastOp = i
		w.sim[op.group] = s
	}
	return nil
}

// termBefore returns the term of the entry before the append b.ops[i], as
// the log will be when it is reached: set by an earlier record of the
// batch, or already in the log (w.mu held).
func (w *WAL) termBefore(b *Batch, i int) uint64 {
	op := &b.ops[i]
	p := op.a - 1
	for j := op.prevSame; j >= 0; j = b.ops[j].prevSame {
		prev := &b.ops[j]
		switch prev.kind {
		case opEntries:
			if p >= prev.a && p < prev.a+uint64(len(prev.ents)) {
				return prev.ents[p-prev.a].GetTerm()
			}
		case opFirstIndex:
			return prev.b // p == prev.a, or validation refused the batch
		case opDropGroup:
			return 0
		}
	}
	if g := w.groups[op.group]; g != nil {
		return g.termAt(p)
	}
	return 0
}

// apply publishes a written batch in the index (w.mu held). It reports
// whether some group's entries in older segments were forgotten.
func (w *WAL) apply(b *Batch, seq uint64, frameOff int64) (forgot bool) {
	for i := range b.ops {
		op := &b.ops[i]
		switch op.kind {
		case opEntries:
			g := w.groupFor(op.group)
			if op.a <= g.last() {
				g.truncateFrom(op.a)
			}
			for j, e := range op.ents {
				off := frameOff + int64(b.entryOffs[op.firstEntry+j])
				g.locs = append(g.locs, entryLoc{
					term: e.GetTerm(),
					seq:  uint32(seq),
					off:  uint32(off),
					size: uint32(entryFixedLen + len(e.GetData())),
					typ:  e.GetType(),
				})
			}
			g.cacheAppend(op.ents, w.cacheLim)
			w.active.noteIndex(op.group, g.last())
		case opHardState:
			g := w.groupFor(op.group)
			g.hasHardState = true
			g.term, g.vote, g.commit = op.a, op.b, op.c
		case opFirstIndex:
			w.groupFor(op.group).reset(op.a, op.b)
			w.forget(op.group)
			forgot = true
		case opDropGroup:
			delete(w.groups, op.group)
			w.forget(op.group)
			forgot = true
		}
	}
	return forgot
}

func (w *WAL) groupFor(id uint32) *group {
	g := w.groups[id]
	if g == nil {
		g = &group{}
		w.groups[id] = g
	}
	return g
}

// forget drops group id from every segment's bookkeeping: its entries
// there are dead (the log was reset or the group dropped).
func (w *WAL) forget(id uint32) {
	for _, s := range w.segments {
		delete(s.maxIndex, id)
	}
}

// encodeState appends the unsealed state frame of the active segment: for
// every group, its first-index point, last entry and hard state, so that
// no older segment holds the only copy of anything still needed.
func (w *WAL) encodeState(buf []byte) []byte {
	buf = append(buf, make([]byte, frameHeaderLen)...)
	w.mu.RLock()
	ids := make([]uint32, 0, len(w.groups))
	for id := range w.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	buf = append(buf, opStateBegin)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(ids)))
	buf = binary.LittleEndian.AppendUint64(buf, w.prevSeq)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(w.prevEnd))
	for _, id := range ids {
		g := w.groups[id]
		buf = append(buf, opGroupState)
		buf = binary.LittleEndian.AppendUint32(buf, id)
		buf = binary.LittleEndian.AppendUint64(buf, g.base)
		buf = binary.LittleEndian.AppendUint64(buf, g.baseTerm)
		buf = binary.LittleEndian.AppendUint64(buf, g.last())
		buf = binary.LittleEndian.AppendUint64(buf, g.termAt(g.last()))
		hs := byte(0)
		if g.hasHardState {
			hs = 1
		}
		buf = append(buf, hs)
		buf = appendHardState(buf, g.term, g.vote, g.commit)
	}
	w.mu.RUnlock()
	binary.LittleEndian.PutUint32(buf[4:], uint32(len(buf)-frameHeaderLen))
	return padFrame(buf, 0)
}

// cutOver makes the prepared segment the active one: the old one is synced
// first (a later segment must never be durable ahead of an earlier one),
// then the prepared file is renamed into place and the directory synced.
func (w *WAL) cutOver() error {
	if w.dirty {
		if err := w.sync(); err != nil {
			return err
		}
	}
	p := <-w.prepared
	if p.err != nil {
		return fmt.Errorf("prepare segment %d: %w", p.seq, p.err)
	}
	name := segmentName(p.seq)
	if err := w.fs.Rename(w.path(p.name), w.path(name)); err != nil {
		p.f.Close()
		return fmt.Errorf("rename %s to %s: %w", p.name, name, err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		p.f.Close()
		return fmt.Errorf("sync dir after creating %s: %w", name, err)
	}
	s := &segment{seq: p.seq, name: name, f: p.f, size: w.segSize, maxIndex: make(map[uint32]uint64)}
	w.mu.Lock()
	w.segments = append(w.segments, s)
	w.mu.Unlock()
	w.prevSeq, w.prevEnd = w.active.seq, w.off
	w.active = s
	w.off = segHeaderSize
	w.syncedOff = segHeaderSize
	w.needState = true
	w.prepareReq <- p.seq + 1
	w.stats.cutOvers.Add(1)
	w.log.Debug().Str("segment", name).Msg("wal cut over to a new segment")
	return nil
}
