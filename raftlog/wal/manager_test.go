package wal

import (
	"os"
	"testing"

	"github.com/rs/zerolog"
)

// TestRetireNeverReplacesAPreparedFile: a preparation of segment 3 cut
// short by a crash leaves its file behind, and a later life recycles it as
// segment 5, while segment 3 itself, made from another recycled file,
// retires. Retiring segment 3 must not take the leftover's name: the
// prepared file would be replaced by the old segment, and segment 5's
// records would go to an unlinked file.
func TestRetireNeverReplacesAPreparedFile(t *testing.T) {
	const segSize = 4096
	w := &WAL{dir: t.TempDir(), fs: OSFS{}, segSize: segSize, log: zerolog.Nop()}
	leftover, _ := w.prepare(3, nil)
	if leftover.err != nil {
		t.Fatal(leftover.err)
	}
	leftover.f.Close()
	seg3, err := w.writeHeader(segmentName(3), 3, os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	next, pool := w.prepare(5, []string{leftover.name})
	if next.err != nil || next.name != leftover.name {
		t.Fatalf("prepare 5 = %+v, want the leftover %s recycled", next, leftover.name)
	}
	defer next.f.Close()
	w.retired = []*segment{{seq: 3, name: segmentName(3), f: seg3, size: segSize}}
	pool = w.retire(pool)
	hdr := make([]byte, segHeaderSize)
	f, err := os.Open(w.path(next.name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(hdr, 0); err != nil {
		t.Fatal(err)
	}
	if seq, why := decodeSegmentHeader(hdr); seq != 5 {
		t.Fatalf("the file prepared as segment 5 (%s) now says segment %d (%s): retiring segment 3 replaced it", next.name, seq, why)
	}
	if len(pool) != 1 {
		t.Fatalf("pool after retiring segment 3 = %v, want it kept for recycling", pool)
	}
}
