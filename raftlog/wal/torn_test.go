package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// written is a batch as it landed on disk, and the model once it did.
type written struct {
	seq        uint64
	start, end int64
	m          *model
}

// writeBatches writes n random batches, returning where each landed.
func writeBatches(t *testing.T, w *WAL, r *randomOps, n int, sync bool) []written {
	t.Helper()
	var out []written
	for range n {
		r.next()
		start := w.off
		if err := w.Write(&r.batch, sync); err != nil {
			t.Fatalf("write: %v", err)
		}
		r.m = r.pending
		if w.active.seq != r.lastSeq {
			start = segHeaderSize
			r.lastSeq = w.active.seq
		}
		out = append(out, written{seq: w.active.seq, start: start, end: w.off, m: r.m.clone()})
	}
	return out
}

// frames lists the [start, end) of the checksummed part of each frame of
// a segment file.
func frames(t *testing.T, data []byte) [][2]int {
	t.Helper()
	seq, why := decodeSegmentHeader(data)
	if why != "" {
		t.Fatal(why)
	}
	var out [][2]int
	for off := segHeaderSize; ; {
		fr, ok := validFrameAt(data, off, seq)
		if !ok {
			return out
		}
		out = append(out, [2]int{off, off + frameHeaderLen + fr.payloadLen})
		off += frameSize(fr.payloadLen)
	}
}

// expectedAt is the model after the last batch entirely before cut in the
// last segment (batches of earlier segments always survive).
func expectedAt(log []written, lastSeq uint64, cut int64) *model {
	m := newModel()
	for _, b := range log {
		if b.seq < lastSeq || b.end <= cut {
			m = b.m
		}
	}
	return m
}

// TestTornTailAtEveryOffset cuts the last segment at every byte offset, in
// three ways a torn write can look (the file cut short, the rest zeros, the
// rest older records as in a recycled file), and checks that reopening
// recovers exactly the batches that were entirely before the cut.
func TestTornTailAtEveryOffset(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	const segSize = 8192
	r := newRandomOps(t, seed, 3)
	r.appendOnly = true
	w := mustOpen(t, Options{Dir: dir, SegmentSize: segSize})
	// A full segment, then a small log in the next one.
	var log []written
	for w.Stats().CutOvers == 0 {
		log = append(log, writeBatches(t, w, r, 1, true)...)
	}
	lastSeq := w.active.seq
	for w.off < 1200 {
		log = append(log, writeBatches(t, w, r, 1, true)...)
	}
	if w.active.seq != lastSeq {
		t.Fatal("the small log spilled into another segment")
	}
	name := w.path(w.active.name)
	dataEnd := w.off
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	// What a recycled file holds: older records, stamped with an older
	// sequence number.
	older, err := os.ReadFile(w.path(segmentName(lastSeq - 1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(older) != len(orig) {
		t.Fatalf("segments of %d and %d bytes", len(older), len(orig))
	}
	// A batch of the last segment survives if the checksummed bytes of
	// its frames are intact (the padding carries nothing), and so do the
	// batches before it.
	fs := frames(t, orig)
	intact := func(data []byte, b written) bool {
		for _, f := range fs {
			if int64(f[0]) >= b.start && int64(f[0]) < b.end {
				if f[1] > len(data) || !bytes.Equal(data[f[0]:f[1]], orig[f[0]:f[1]]) {
					return false
				}
			}
		}
		return true
	}
	expected := func(data []byte) *model {
		m := newModel()
		for _, b := range log {
			if b.seq == lastSeq && !intact(data, b) {
				break
			}
			m = b.m
		}
		return m
	}

	saved := snapshotDir(t, dir)
	variants := []struct {
		name string
		cut  func(c int) []byte
	}{
		{"truncated", func(c int) []byte { return orig[:c] }},
		{"zeroed", func(c int) []byte { return append(orig[:c:c], make([]byte, len(orig)-c)...) }},
		{"older records", func(c int) []byte { return append(orig[:c:c], older[c:]...) }},
	}
	for _, v := range variants {
		for c := 0; c <= int(dataEnd)+frameAlign; c++ {
			data := v.cut(c)
			overwrite(t, name, data)
			w, err := Open(Options{Dir: dir, SegmentSize: segSize, FS: NewCrashFS(), Logger: zerolog.Nop()})
			if len(data) < segHeaderSize || !bytes.Equal(data[:segHeaderSize], orig[:segHeaderSize]) {
				// The header is durable before the file becomes a
				// segment: damage there is not a torn write.
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("%s at %d (in the header): open: %v, want a CorruptError", v.name, c, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s at %d: open: %v", v.name, c, err)
			}
			want := expected(data)
			if err := want.diff(w, r.rng, true); err != nil {
				t.Fatalf("%s at %d: %v", v.name, c, err)
			}
			if c%97 == 0 {
				// The repaired log takes new writes and reopens intact.
				r2 := *r
				r2.m = want.clone()
				more := writeBatches(t, w, &r2, 2, true)
				w.Close()
				w = mustOpen(t, Options{Dir: dir, SegmentSize: segSize, FS: NewCrashFS()})
				if err := more[1].m.diff(w, r.rng, true); err != nil {
					t.Fatalf("%s at %d, written again and reopened: %v", v.name, c, err)
				}
				w.Close()
				restoreDir(t, dir, saved)
				continue
			}
			w.Close()
		}
	}
}

// TestBitFlip flips bits inside records: in any record but the very last
// one Open refuses with a CorruptError naming the file and the record's
// offset; in the last one it is a torn tail, truncated.
func TestBitFlip(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	const segSize = 4096
	r := newRandomOps(t, seed, 3)
	r.appendOnly = true
	w := mustOpen(t, Options{Dir: dir, SegmentSize: segSize})
	var log []written
	for w.Stats().CutOvers < 2 || len(log) < 5 || log[len(log)-1].start == segHeaderSize {
		log = append(log, writeBatches(t, w, r, 1, true)...)
	}
	lastSeq := w.active.seq
	w.Close()

	segs := []uint64{lastSeq - 1, lastSeq}
	for _, seq := range segs {
		name := w.path(segmentName(seq))
		orig, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		fs := frames(t, orig)
		if len(fs) < 2 {
			t.Fatalf("segment %d has %d frames", seq, len(fs))
		}
		for fi, fr := range fs {
			lastFrame := seq == lastSeq && fi == len(fs)-1
			for range 8 {
				bit := fr[0]*8 + r.rng.IntN((fr[1]-fr[0])*8)
				data := bytes.Clone(orig)
				data[bit/8] ^= 1 << (bit % 8)
				if err := os.WriteFile(name, data, 0o644); err != nil {
					t.Fatal(err)
				}
				var logBuf bytes.Buffer
				w, err := Open(Options{Dir: dir, SegmentSize: segSize, FS: NewCrashFS(), Logger: zerolog.New(&logBuf)})
				if lastFrame {
					if err != nil {
						t.Fatalf("flip at byte %d of the last record: open: %v", bit/8, err)
					}
					if err := expectedAt(log, lastSeq, int64(fr[0])).diff(w, r.rng, false); err != nil {
						t.Fatalf("flip at byte %d of the last record: %v", bit/8, err)
					}
					logged := logBuf.String()
					if w.Stats().TornTailBytes == 0 || !strings.Contains(logged, "torn") || !strings.Contains(logged, `"file":"`+name+`"`) ||
						!strings.Contains(logged, fmt.Sprintf(`"offset":%d`, fr[0])) || !strings.Contains(logged, `"bytes_dropped":`) {
						t.Fatalf("flip at byte %d of the last record: not reported as a torn tail (log %q)", bit/8, logBuf.String())
					}
					w.Close()
					continue
				}
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("segment %d frame %d, flip at byte %d: open: %v, want a CorruptError", seq, fi, bit/8, err)
				}
				if ce.File != name || ce.Offset != int64(fr[0]) {
					t.Fatalf("flip at byte %d of the record at %d in %s: %v", bit/8, fr[0], name, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, name) || !strings.Contains(msg, fmt.Sprint(fr[0])) || !strings.Contains(msg, "Backup and restore") {
					t.Fatalf("error does not name file, offset and the way out: %s", msg)
				}
			}
		}
		if err := os.WriteFile(name, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDamageBeforeUnsyncedRecordsIsTorn: records written without a sync
// may reach the disk in any order, so bad bytes followed only by records
// no completed sync covered are a torn tail, not corruption.
func TestDamageBeforeUnsyncedRecordsIsTorn(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	r := newRandomOps(t, seed, 3)
	w := mustOpen(t, Options{Dir: dir, SegmentSize: 1 << 20})
	log := writeBatches(t, w, r, 1, true)
	log = append(log, writeBatches(t, w, r, 4, false)...)
	name := w.path(w.active.name)
	w.Close()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	data[log[1].start+frameHeaderLen] ^= 0x10 // inside the second batch
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	w = mustOpen(t, Options{Dir: dir, SegmentSize: 1 << 20})
	defer w.Close()
	log[0].m.check(t, w, r.rng)
}

func TestNotASegment(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/0000000000000001.wal", bytes.Repeat([]byte("not a log "), 500), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Options{Dir: dir, Logger: zerolog.Nop()})
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "not a raftgate WAL segment") {
		t.Fatalf("open of a foreign file: %v", err)
	}
	if err := os.WriteFile(dir+"/0000000000000001.wal", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/raft.wal", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir, Logger: zerolog.Nop()}); err == nil || !strings.Contains(err.Error(), "raft.wal") {
		t.Fatalf("open with a foreign .wal name: %v", err)
	}
}

// snapshotDir reads every file of dir.
func snapshotDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	names, err := OSFS{}.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := make(map[string][]byte)
	for _, n := range names {
		if files[n], err = os.ReadFile(dir + "/" + n); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// restoreDir makes dir hold exactly the files of a snapshot.
func restoreDir(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	names, err := OSFS{}.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, ok := files[n]; !ok {
			if err := os.Remove(dir + "/" + n); err != nil {
				t.Fatal(err)
			}
		}
	}
	for n, data := range files {
		if err := os.WriteFile(dir+"/"+n, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// overwrite makes the file hold data, in place: rewriting through O_TRUNC
// makes ext4 flush the file on close (its replace-by-truncate heuristic),
// which is slow on a busy disk.
func overwrite(t *testing.T, name string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		t.Fatal(err)
	}
}
