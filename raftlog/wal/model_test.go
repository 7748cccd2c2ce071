package wal

import (
	"math/rand/v2"
	"testing"

	raftpb "go.etcd.io/raft/v3/raftpb"
)

func TestBasicRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, Options{Dir: dir, SegmentSize: 4096})
	m := newModel()
	var b Batch
	b.Append(1, []*raftpb.Entry{ent(1, 1, "a"), ent(2, 1, ""), ent(3, 1, "ccc")})
	b.SetHardState(1, hardState(1, 2, 2))
	b.Append(7, []*raftpb.Entry{ent(1, 3, "x")})
	if err := w.Write(&b, true); err != nil {
		t.Fatal(err)
	}
	m.append(1, []*raftpb.Entry{ent(1, 1, "a"), ent(2, 1, ""), ent(3, 1, "ccc")})
	m.group(1).hs = hardState(1, 2, 2)
	m.append(7, []*raftpb.Entry{ent(1, 3, "x")})
	rng := rand.New(rand.NewPCG(1, 2))
	m.check(t, w, rng)

	b.Reset()
	b.Append(1, []*raftpb.Entry{ent(2, 2, "b2"), ent(3, 2, "c2"), ent(4, 2, "d2")})
	b.SetFirstIndex(7, 10, 4)
	if err := w.Write(&b, false); err != nil {
		t.Fatal(err)
	}
	m.append(1, []*raftpb.Entry{ent(2, 2, "b2"), ent(3, 2, "c2"), ent(4, 2, "d2")})
	m.setFirstIndex(7, 10, 4)
	m.check(t, w, rng)

	b.Reset()
	b.Append(1, []*raftpb.Entry{ent(9, 2, "gap")})
	if err := w.Write(&b, true); err == nil {
		t.Fatal("a gap was accepted")
	}
	b.Reset()
	b.Append(7, []*raftpb.Entry{ent(11, 4, "after snapshot")})
	b.DropGroup(9)
	if err := w.Write(&b, true); err != nil {
		t.Fatalf("the log is unusable after a refused batch: %v", err)
	}
	m.append(7, []*raftpb.Entry{ent(11, 4, "after snapshot")})
	w.Release(1, 2)
	m.release(1, 2)
	m.check(t, w, rng)

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = mustOpen(t, Options{Dir: dir, SegmentSize: 4096})
	defer w.Close()
	m.releaseAll(w)
	m.check(t, w, rng)
}

// randomOps writes seeded random batches for many groups to w, keeping m
// in step, with releases between writes and reopens now and then.
type randomOps struct {
	t       *testing.T
	rng     *rand.Rand
	m       *model
	groups  int
	terms   map[uint32]uint64
	batch   Batch
	pending *model
}

func newRandomOps(t *testing.T, seed uint64, groups int) *randomOps {
	return &randomOps{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), m: newModel(), groups: groups, terms: make(map[uint32]uint64)}
}

// next fills r.batch with a random batch and r.pending with the model as
// it will be once the batch is written.
func (r *randomOps) next() {
	rng := r.rng
	r.batch.Reset()
	r.pending = r.m.clone()
	for range 1 + rng.IntN(6) {
		id := uint32(1 + rng.IntN(r.groups))
		g := r.pending.group(id)
		switch x := rng.IntN(100); {
		case x < 60:
			first := g.last() + 1
			if len(g.ents) > 0 && rng.IntN(5) == 0 {
				first = g.base + 1 + rng.Uint64N(uint64(len(g.ents)))
				r.terms[id]++ // a new leader overwrites the tail
			}
			r.terms[id] = max(r.terms[id], g.term(first-1))
			ents := make([]*raftpb.Entry, 1+rng.IntN(5))
			for i := range ents {
				data := make([]byte, rng.IntN(100))
				for j := range data {
					data[j] = byte(rng.Uint32())
				}
				e := &raftpb.Entry{Index: new(first + uint64(i)), Term: new(r.terms[id])}
				if len(data) > 0 {
					e.Data = data
				}
				if rng.IntN(20) == 0 {
					e.Type = raftpb.EntryConfChange.Enum()
				}
				ents[i] = e
			}
			r.batch.Append(id, ents)
			r.pending.append(id, ents)
		case x < 80:
			hs := hardState(r.terms[id], uint64(rng.IntN(4)), g.last())
			r.batch.SetHardState(id, hs)
			g.hs = hs
		case x < 90:
			index := g.last() + rng.Uint64N(5)
			r.terms[id]++
			r.batch.SetFirstIndex(id, index, r.terms[id])
			r.pending.setFirstIndex(id, index, r.terms[id])
		default:
			r.batch.DropGroup(id)
			delete(r.pending.groups, id)
		}
	}
}

// release releases a random prefix of a random group in w and m.
func (r *randomOps) release(w *WAL) {
	id := uint32(1 + r.rng.IntN(r.groups))
	g := r.m.groups[id]
	if g == nil {
		return
	}
	index := g.base + r.rng.Uint64N(uint64(len(g.ents))+1)
	w.Release(id, index)
	r.m.release(id, index)
}

func TestRandomAgainstModel(t *testing.T) {
	seed := testSeed(t)
	r := newRandomOps(t, seed, 8)
	dir := t.TempDir()
	segSize := int64(4096 + r.rng.IntN(3)*4096)
	w := mustOpen(t, Options{Dir: dir, SegmentSize: segSize, CacheBytes: 300 + r.rng.IntN(2000)})
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	reopens := 0
	var cutOvers, retired uint64
	count := func() {
		st := w.Stats()
		cutOvers += st.CutOvers
		retired += st.Removed + st.Recycled
	}
	for step := range 2000 {
		r.next()
		if err := w.Write(&r.batch, r.rng.IntN(2) == 0); err != nil {
			t.Fatalf("step %d: write: %v", step, err)
		}
		r.m = r.pending
		for range r.rng.IntN(3) {
			r.release(w)
		}
		if r.rng.IntN(25) == 0 {
			r.m.check(t, w, r.rng)
		}
		if r.rng.IntN(150) == 0 {
			count()
			if err := w.Close(); err != nil {
				t.Fatalf("step %d: close: %v", step, err)
			}
			var err error
			w, err = Open(Options{Dir: dir, SegmentSize: segSize, Logger: testLogger(t)})
			if err != nil {
				dumpCorrupt(err, dir)
				t.Fatal(err)
			}
			r.m.releaseAll(w)
			r.m.check(t, w, r.rng)
			reopens++
		}
	}
	r.m.check(t, w, r.rng)
	count()
	st := w.Stats()
	t.Logf("reopens %d, cut-overs %d, segments retired %d, last stats %+v", reopens, cutOvers, retired, st)
	if cutOvers == 0 || retired == 0 {
		t.Fatalf("the test did not exercise cut-overs and segment deletion")
	}
	if st.Segments > 40 {
		t.Fatalf("%d segments live: released segments are not deleted", st.Segments)
	}
}
