package wal

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3"
	raftpb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var seedFlag = flag.Uint64("wal.seed", 0, "seed for the randomized wal tests (0: from the clock; env WAL_SEED also works)")

// testSeed returns the seed for this test and prints it if the test fails.
func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if s := os.Getenv("WAL_SEED"); seed == 0 && s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WAL_SEED: %v", err)
		}
		seed = v
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with -wal.seed=%d (or WAL_SEED=%d)", seed, seed)
		}
	})
	return seed
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

func mustOpen(t *testing.T, opts Options) *WAL {
	t.Helper()
	opts.Logger = testLogger(t)
	w, err := Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return w
}

func ent(index, term uint64, data string) *raftpb.Entry {
	e := &raftpb.Entry{Index: new(index), Term: new(term)}
	if data != "" {
		e.Data = []byte(data)
	}
	return e
}

func hardState(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

// model is the simple in-memory log the WAL must agree with.
type model struct{ groups map[uint32]*modelGroup }

type modelGroup struct {
	base, baseTerm uint64
	ents           []*raftpb.Entry // base+1 ...
	hs             *raftpb.HardState
}

func newModel() *model { return &model{groups: make(map[uint32]*modelGroup)} }

func (m *model) clone() *model {
	c := newModel()
	for id, g := range m.groups {
		cg := *g
		cg.ents = append([]*raftpb.Entry(nil), g.ents...)
		c.groups[id] = &cg
	}
	return c
}

func (m *model) group(id uint32) *modelGroup {
	g := m.groups[id]
	if g == nil {
		g = &modelGroup{}
		m.groups[id] = g
	}
	return g
}

func (g *modelGroup) last() uint64 { return g.base + uint64(len(g.ents)) }

func (g *modelGroup) term(i uint64) uint64 {
	if i == g.base {
		return g.baseTerm
	}
	return g.ents[i-g.base-1].GetTerm()
}

func (m *model) append(id uint32, ents []*raftpb.Entry) {
	g := m.group(id)
	first := ents[0].GetIndex()
	g.ents = append(g.ents[:first-g.base-1:first-g.base-1], ents...)
}

func (m *model) setFirstIndex(id uint32, index, term uint64) {
	g := m.group(id)
	g.base, g.baseTerm, g.ents = index, term, nil
}

func (m *model) release(id uint32, index uint64) {
	g := m.groups[id]
	if g == nil {
		return
	}
	index = min(index, g.last())
	if index <= g.base {
		return
	}
	g.baseTerm = g.term(index)
	g.ents = g.ents[index-g.base:]
	g.base = index
}

// releaseAll makes a reopened WAL forget what the model released (Release
// is not durable: the caller repeats it after a restart).
func (m *model) releaseAll(w *WAL) {
	for id, g := range m.groups {
		w.Release(id, g.base)
	}
}

// check compares the WAL with the model through the read API.
func (m *model) check(t *testing.T, w *WAL, rng *rand.Rand) {
	t.Helper()
	var ids []uint32
	for id := range m.groups {
		ids = append(ids, id)
	}
	got := w.Groups()
	if len(got) != len(ids) {
		t.Fatalf("Groups() = %v, model has %d groups", got, len(ids))
	}
	for _, id := range got {
		g := m.groups[id]
		if g == nil {
			t.Fatalf("Groups() lists %d, which the model does not have", id)
		}
		if fi, li := w.FirstIndex(id), w.LastIndex(id); fi != g.base+1 || li != g.last() {
			t.Fatalf("group %d: first/last = %d/%d, want %d/%d", id, fi, li, g.base+1, g.last())
		}
		if hs, want := w.HardState(id), g.hs; !proto.Equal(hs, orEmpty(want)) {
			t.Fatalf("group %d: hard state %v, want %v", id, hs, want)
		}
		if _, err := w.Term(id, g.base-min(g.base, 1)); g.base > 0 && err != raft.ErrCompacted {
			t.Fatalf("group %d: Term below base: %v, want ErrCompacted", id, err)
		}
		if _, err := w.Term(id, g.last()+1); err != raft.ErrUnavailable {
			t.Fatalf("group %d: Term past last: %v, want ErrUnavailable", id, err)
		}
		for i := g.base; i <= g.last(); i++ {
			term, err := w.Term(id, i)
			if err != nil || term != g.term(i) {
				t.Fatalf("group %d: Term(%d) = %d, %v; want %d", id, i, term, err, g.term(i))
			}
		}
		if len(g.ents) == 0 {
			continue
		}
		all, err := w.Entries(id, g.base+1, g.last()+1, 1<<62)
		if err != nil {
			t.Fatalf("group %d: Entries: %v", id, err)
		}
		equalEntries(t, id, all, g.ents)
		// A few random windows with a size limit.
		for range 3 {
			lo := g.base + 1 + rng.Uint64N(uint64(len(g.ents)))
			hi := lo + 1 + rng.Uint64N(g.last()+1-lo)
			maxSize := rng.Uint64N(600)
			got, err := w.Entries(id, lo, hi, maxSize)
			if err != nil {
				t.Fatalf("group %d: Entries(%d, %d, %d): %v", id, lo, hi, maxSize, err)
			}
			equalEntries(t, id, got, limitSize(g.ents[lo-g.base-1:hi-g.base-1], maxSize))
		}
	}
}

func orEmpty(hs *raftpb.HardState) *raftpb.HardState {
	if hs == nil {
		return &raftpb.HardState{}
	}
	return hs
}

// limitSize is raft's rule: at least one entry, then while within maxSize.
func limitSize(ents []*raftpb.Entry, maxSize uint64) []*raftpb.Entry {
	size := uint64(proto.Size(ents[0]))
	for i := 1; i < len(ents); i++ {
		size += uint64(proto.Size(ents[i]))
		if size > maxSize {
			return ents[:i]
		}
	}
	return ents
}

func equalEntries(t *testing.T, id uint32, got, want []*raftpb.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("group %d: %d entries, want %d", id, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.GetIndex() != w.GetIndex() || g.GetTerm() != w.GetTerm() || g.GetType() != w.GetType() || !bytes.Equal(g.GetData(), w.GetData()) {
			t.Fatalf("group %d: entry %d = %v, want %v", id, i, g, w)
		}
		if proto.Size(g) != proto.Size(w) {
			t.Fatalf("group %d: entry %d size %d, want %d", id, w.GetIndex(), proto.Size(g), proto.Size(w))
		}
	}
}
