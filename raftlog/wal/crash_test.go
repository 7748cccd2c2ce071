package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	raftpb "go.etcd.io/raft/v3/raftpb"
)

// Where a crash strikes during a Write.
const (
	crashAfterReturn = iota // between two Writes
	crashBeforeWrite
	crashAfterWrite
	crashAfterSync
)

// crashRun drives one life of a WAL on a CrashFS: it opens dir, checks
// that what it recovered is one of candidates (the durable state, then
// each later unsynced one), writes random batches, and crashes at
// crashAt, in the way given. It returns the candidates for the next life.
type crashRun struct {
	t          *testing.T
	r          *randomOps
	dir        string
	segSize    int64
	releaseAll bool // release everything after every write (heavy recycling)
	stats      Stats
}

func (c *crashRun) life(candidates []*model, writes, crashAt, how int) []*model {
	t, r := c.t, c.r
	cfs := NewCrashFS()
	w := mustOpen(t, Options{Dir: c.dir, SegmentSize: c.segSize, FS: cfs})
	c.recovered(w, candidates)
	candidates = []*model{r.m.clone()}

	crashed := false
	crash := func() {
		if !crashed {
			crashed = true
			if err := cfs.Crash(); err != nil {
				t.Fatalf("crash: %v", err)
			}
		}
	}
	for i := range writes {
		w.knobs = Knobs{}
		if i == crashAt {
			switch how {
			case crashBeforeWrite:
				w.knobs.BeforeWrite = crash
			case crashAfterWrite:
				w.knobs.AfterWrite = crash
			case crashAfterSync:
				w.knobs.AfterSync = crash
			}
		}
		r.next()
		err := w.Write(&r.batch, r.rng.IntN(3) > 0)
		if err != nil {
			if !crashed {
				t.Fatalf("write %d: %v", i, err)
			}
			break
		}
		r.m = r.pending
		if w.dirty {
			candidates = append(candidates, r.m.clone())
		} else {
			// Write returned after a completed sync: this batch must
			// survive, whatever happens next.
			candidates = []*model{r.m.clone()}
		}
		if crashed {
			break
		}
		for id, g := range r.m.groups {
			if c.releaseAll || r.rng.IntN(4) == 0 {
				w.Release(id, g.last())
				r.m.release(id, g.last())
			}
		}
		if i == crashAt {
			crash()
			break
		}
	}
	crash()
	var b Batch
	b.SetHardState(1, hardState(1, 1, 0))
	if err := w.Write(&b, true); err == nil {
		t.Fatal("the WAL took a write after its file system crashed")
	}
	st := w.Stats()
	c.stats.CutOvers += st.CutOvers
	c.stats.Recycled += st.Recycled
	c.stats.Removed += st.Removed
	w.Close()
	return candidates
}

// recovered checks that w holds one of candidates and makes it the model.
func (c *crashRun) recovered(w *WAL, candidates []*model) {
	t, r := c.t, c.r
	var errs []error
	for i, m := range slices.Backward(candidates) {
		err := m.diff(w, r.rng, true)
		if err == nil {
			r.m = m.clone()
			// Release is not durable: the caller repeats it, and the log
			// may have moved the first index up by retiring segments.
			for id, g := range r.m.groups {
				if fi := w.FirstIndex(id); fi > g.base+1 {
					r.m.release(id, fi-1)
				}
			}
			r.m.releaseAll(w)
			r.m.check(t, w, r.rng)
			return
		}
		errs = append(errs, fmt.Errorf("candidate %d: %w", i, err))
	}
	t.Fatalf("the recovered log is none of the %d possible states (the first is the durable one):\n%v", len(candidates), errors.Join(errs...))
}

// TestPowerLoss crashes a WAL on a CrashFS at random points, including at
// each durability boundary (before the write, after the write, after the
// fdatasync), and checks that every batch whose Write synced survives,
// that the log is one of the states it passed through, and that it takes
// writes again.
func TestPowerLoss(t *testing.T) {
	seed := testSeed(t)
	c := &crashRun{t: t, r: newRandomOps(t, seed, 6), dir: t.TempDir(), segSize: 4096}
	candidates := []*model{newModel()}
	// 60 lives, and more (up to 240) until cut-overs, recycling and
	// removal have all happened: which of them a life meets depends on
	// the segment manager's timing too.
	exercised := func() bool { return c.stats.CutOvers > 0 && c.stats.Recycled > 0 && c.stats.Removed > 0 }
	for life := 0; life < 60 || (!exercised() && life < 240); life++ {
		writes := 1 + c.r.rng.IntN(40)
		candidates = c.life(candidates, writes, c.r.rng.IntN(writes), c.r.rng.IntN(4))
	}
	w := mustOpen(t, Options{Dir: c.dir, SegmentSize: c.segSize, FS: NewCrashFS()})
	c.recovered(w, candidates)
	w.Close()
	t.Logf("stats over all lives: %+v", c.stats)
	if !exercised() {
		t.Fatal("the test did not exercise cut-overs, recycling and removal")
	}
}

// TestRecycledSegmentsAfterCrash fills segments, releases everything so
// they are recycled (their older records stay in the file), and crashes at
// every point of a run: older records never pass for new ones.
func TestRecycledSegmentsAfterCrash(t *testing.T) {
	seed := testSeed(t)
	for crashAt := 0; crashAt < 60; crashAt += 3 {
		c := &crashRun{t: t, r: newRandomOps(t, seed+uint64(crashAt), 2), dir: t.TempDir(), segSize: 4096, releaseAll: true}
		c.r.appendOnly = true
		candidates := c.life([]*model{newModel()}, 60, 1000, 0) // no crash: fill and recycle
		candidates = c.life(candidates, 60, crashAt, crashAt%4)
		w := mustOpen(t, Options{Dir: c.dir, SegmentSize: c.segSize, FS: NewCrashFS()})
		c.recovered(w, candidates)
		w.Close()
		if c.stats.Recycled == 0 {
			t.Fatalf("crash at %d: no segment was recycled", crashAt)
		}
	}
}

func TestKnobsFireInOrder(t *testing.T) {
	var calls []string
	w := mustOpen(t, Options{Dir: t.TempDir(), Knobs: &Knobs{
		BeforeWrite: func() { calls = append(calls, "before-write") },
		AfterWrite:  func() { calls = append(calls, "after-write") },
		AfterSync:   func() { calls = append(calls, "after-sync") },
	}})
	defer w.Close()
	var b Batch
	b.Append(1, []*raftpb.Entry{ent(1, 1, "x")})
	if err := w.Write(&b, true); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	b.Append(1, []*raftpb.Entry{ent(2, 1, "y")})
	if err := w.Write(&b, false); err != nil {
		t.Fatal(err)
	}
	want := []string{"before-write", "after-write", "after-sync", "before-write", "after-write"}
	if !slices.Equal(calls, want) {
		t.Fatalf("knobs fired %v, want %v", calls, want)
	}
}

// failingFS fails every write once told to.
type failingFS struct {
	OSFS
	fail *atomic.Bool
}

func (f failingFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return failingFile{file, f.fail}, nil
}

type failingFile struct {
	File
	fail *atomic.Bool
}

func (f failingFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fail.Load() {
		return 0, errors.New("injected write error")
	}
	return f.File.WriteAt(p, off)
}

func TestBrokenAfterWriteError(t *testing.T) {
	var fail atomic.Bool
	w := mustOpen(t, Options{Dir: t.TempDir(), FS: failingFS{fail: &fail}})
	defer w.Close()
	var b Batch
	b.Append(1, []*raftpb.Entry{ent(1, 1, "x")})
	fail.Store(true)
	err := w.Write(&b, true)
	if err == nil {
		t.Fatal("write error not reported")
	}
	fail.Store(false)
	b.Reset()
	b.Append(1, []*raftpb.Entry{ent(1, 1, "x")})
	if err2 := w.Write(&b, true); err2 != err {
		t.Fatalf("write after a failed write: %v, want the same error %v", err2, err)
	}
	if w.LastIndex(1) != 0 {
		t.Fatal("a failed write was published in the index")
	}
}

func TestCrashFS(t *testing.T) {
	dir := t.TempDir()
	fs := NewCrashFS()
	path := func(n string) string { return filepath.Join(dir, n) }
	write := func(name, data string, sync bool) {
		f, err := fs.OpenFile(path(name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		size, _ := f.Size()
		if _, err := f.WriteAt([]byte(data), size); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
	}
	write("a", "synced,", true)
	write("a", "lost", false)
	write("b", "synced but its name is not", true)
	if err := fs.SyncDir(dir); err != nil { // a and b exist durably
		t.Fatal(err)
	}
	write("c", "never dir-synced", true)
	if err := fs.Rename(path("a"), path("a2")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(path("b")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Crash(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.OpenFile(path("a"), os.O_RDONLY, 0); err != ErrCrashed {
		t.Fatalf("open after crash: %v", err)
	}
	got := func(name string) string {
		data, err := os.ReadFile(path(name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(data)
	}
	if a := got("a"); a != "synced," {
		t.Fatalf("a = %q: the unsynced write or the undone rename is wrong", a)
	}
	if b := got("b"); b != "synced but its name is not" {
		t.Fatalf("b = %q: the removal was not undone", b)
	}
	for _, n := range []string{"a2", "c"} {
		if _, err := os.Stat(path(n)); !os.IsNotExist(err) {
			t.Fatalf("%s survived without a directory sync: %v", n, err)
		}
	}
}

// TestRetireWaitsForStateFrame: after a crash right after a cut-over (the
// new segment has no state frame yet), the segment before it holds the
// only copy of the groups' state and must not be retired, however much
// is released, until the new segment's state frame is durable.
func TestRetireWaitsForStateFrame(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	r := newRandomOps(t, seed, 3)
	r.appendOnly = true
	w := mustOpen(t, Options{Dir: dir, SegmentSize: 4096})
	var log []written
	for w.Stats().CutOvers == 0 {
		log = append(log, writeBatches(t, w, r, 1, true)...)
	}
	lastSeq := w.active.seq
	w.Close()
	// The crash struck between the cut-over's rename and its first write.
	if err := os.Truncate(w.path(segmentName(lastSeq)), segHeaderSize); err != nil {
		t.Fatal(err)
	}
	r.m = expectedAt(log, lastSeq, 0)

	cfs := NewCrashFS()
	w = mustOpen(t, Options{Dir: dir, SegmentSize: 4096, FS: cfs})
	r.m.check(t, w, r.rng)
	for id, g := range r.m.groups {
		w.Release(id, g.last())
		r.m.release(id, g.last())
	}
	w.mu.RLock()
	live, retired := len(w.segments), len(w.retired)
	w.mu.RUnlock()
	if live != 2 || retired != 0 {
		t.Fatalf("%d segments live, %d retired: the only copy of the state was retired", live, retired)
	}
	// Once the new segment's state frame is written, the old one may go.
	log = writeBatches(t, w, r, 1, true)
	for id, g := range r.m.groups {
		w.Release(id, g.last())
		r.m.release(id, g.last())
	}
	w.mu.RLock()
	live = len(w.segments)
	w.mu.RUnlock()
	if live != 1 {
		for _, sg := range w.segments {
			t.Logf("segment %d hasState %v maxIndex %v", sg.seq, sg.hasState, sg.maxIndex)
		}
		for id, g := range w.groups {
			t.Logf("group %d base %d last %d", id, g.base, g.last())
		}
		t.Fatalf("%d segments live after the state frame was written and everything released", live)
	}
	if err := cfs.Crash(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w = mustOpen(t, Options{Dir: dir, SegmentSize: 4096, FS: NewCrashFS()})
	defer w.Close()
	if err := log[0].m.diff(w, r.rng, true); err != nil {
		t.Fatal(err)
	}
}

// TestProcessCrashThenPowerLoss: a process restart keeps unsynced writes
// in the page cache (the same CrashFS); when the first write after the
// restart starts a new segment, a later power loss must not leave a hole
// behind it.
func TestProcessCrashThenPowerLoss(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	r := newRandomOps(t, seed, 3)
	r.appendOnly = true
	cfs := NewCrashFS() // one machine: its page cache outlives the process
	w := mustOpen(t, Options{Dir: dir, SegmentSize: 4096, FS: cfs})
	writeBatches(t, w, r, 1, true)
	for w.off < 3500 {
		writeBatches(t, w, r, 1, false)
	}
	seq := w.active.seq
	w.Close() // the process dies; nothing is lost yet
	w = mustOpen(t, Options{Dir: dir, SegmentSize: 4096, FS: cfs})
	r.m.check(t, w, r.rng)
	var log []written
	for w.active.seq == seq {
		log = append(log, writeBatches(t, w, r, 1, true)...)
	}
	if err := cfs.Crash(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w = mustOpen(t, Options{Dir: dir, SegmentSize: 4096, FS: NewCrashFS()})
	defer w.Close()
	log[len(log)-1].m.check(t, w, r.rng)
}
