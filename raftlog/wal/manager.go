package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// poolMax is how many retired segments are kept for recycling.
const poolMax = 2

// prepared is a segment file made ready for the next cut-over: its header
// carries its sequence number and it is full size, durably.
type prepared struct {
	seq  uint64
	name string // its temporary name in the directory
	f    File
	err  error
}

func (w *WAL) path(name string) string { return filepath.Join(w.dir, name) }

// manage is the segment manager goroutine: it prepares the next segment
// ahead of time, so a cut-over does not stall a write, and deletes or
// recycles retired segments. pool holds the names of files kept for
// recycling.
func (w *WAL) manage(pool []string) {
	defer w.wg.Done()
	for {
		select {
		case <-w.stop:
			return
		case <-w.wake:
			pool = w.retire(pool)
		case seq := <-w.prepareReq:
			pool = w.retire(pool)
			var p prepared
			p, pool = w.prepare(seq, pool)
			w.prepared <- p // the writer took the previous one before asking
		}
	}
}

// retire closes the retired segments and keeps up to poolMax of them for
// recycling (renamed to a temporary name), deleting the rest; then the
// directory is synced.
func (w *WAL) retire(pool []string) []string {
	w.mu.Lock()
	segs := w.retired
	w.retired = nil
	w.mu.Unlock()
	if len(segs) == 0 {
		return pool
	}
	for _, s := range segs {
		s.mu.Lock()
		f := s.f
		s.f = nil
		s.mu.Unlock()
		if f != nil {
			if err := f.Close(); err != nil {
				w.log.Error().Err(err).Str("segment", s.name).Msg("wal close retired segment")
			}
		}
		if len(pool) < poolMax && s.size == w.segSize {
			name := recycledName(s.seq)
			if err := w.fs.Rename(w.path(s.name), w.path(name)); err == nil {
				pool = append(pool, name)
				w.log.Debug().Str("segment", s.name).Msg("wal segment retired for recycling")
				continue
			}
		}
		if err := w.fs.Remove(w.path(s.name)); err != nil {
			w.log.Error().Err(err).Str("segment", s.name).Msg("wal remove retired segment")
			continue
		}
		w.stats.removed.Add(1)
		w.log.Debug().Str("segment", s.name).Msg("wal segment removed")
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		w.log.Error().Err(err).Msg("wal sync dir after retiring segments")
	}
	return pool
}

// prepare makes segment seq ready: a recycled file from the pool (its old
// bytes stay, stamped with an older sequence number) or a new one
// pre-written with zeros (not fallocated: unwritten extents make every
// fdatasync commit the file system's journal too).
func (w *WAL) prepare(seq uint64, pool []string) (prepared, []string) {
	for len(pool) > 0 {
		name := pool[0]
		pool = pool[1:]
		f, err := w.writeHeader(name, seq, 0)
		if err == nil {
			w.stats.recycled.Add(1)
			return prepared{seq: seq, name: name, f: f}, pool
		}
		w.log.Warn().Err(err).Str("file", name).Msg("wal recycle segment failed, creating a new one")
		_ = w.fs.Remove(w.path(name))
	}
	name := tmpName(seq)
	f, err := w.writeHeader(name, seq, os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return prepared{seq: seq, err: err}, pool
	}
	return prepared{seq: seq, name: name, f: f}, pool
}

// writeHeader opens name, stamps it as segment seq, zero-fills it to full
// size if it is shorter, and syncs it.
func (w *WAL) writeHeader(name string, seq uint64, flag int) (File, error) {
	f, err := w.fs.OpenFile(w.path(name), os.O_RDWR|flag, 0o600)
	if err != nil {
		return nil, err
	}
	err = func() error {
		size, err := f.Size()
		if err != nil {
			return err
		}
		hdr := make([]byte, segHeaderSize)
		encodeSegmentHeader(hdr, seq)
		if _, err := f.WriteAt(hdr, 0); err != nil {
			return err
		}
		if size < w.segSize {
			if err := writeZeros(f, max(size, segHeaderSize), w.segSize); err != nil {
				return err
			}
		}
		return f.Sync()
	}()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("prepare %s: %w", name, err), f.Close())
	}
	return f, nil
}

// writeZeros writes zeros to f over [from, to).
func writeZeros(f File, from, to int64) error {
	if from >= to {
		return nil
	}
	zeros := make([]byte, min(to-from, 1<<20))
	for off := from; off < to; {
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}
