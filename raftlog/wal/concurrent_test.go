package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"go.etcd.io/raft/v3"
	raftpb "go.etcd.io/raft/v3/raftpb"
)

// selfDescribing is entry data that names its group, index and term.
func selfDescribing(g uint32, index, term uint64) []byte {
	b := make([]byte, 0, 40)
	b = binary.LittleEndian.AppendUint32(b, g)
	b = binary.LittleEndian.AppendUint64(b, index)
	b = binary.LittleEndian.AppendUint64(b, term)
	return append(b, bytes.Repeat([]byte{byte(index)}, int(index%40))...)
}

// TestConcurrentReaders runs readers and a releaser against the writer
// (under -race this checks the locking): every entry a read returns is the
// one it asked for, whether it came from the cache or from disk, and reads
// of retired segments fail cleanly.
func TestConcurrentReaders(t *testing.T) {
	seed := testSeed(t)
	const groups = 4
	w := mustOpen(t, Options{Dir: t.TempDir(), SegmentSize: 8192, CacheBytes: 2000, FS: NewCrashFS()})
	defer w.Close()
	// Each reader and the releaser act once per write (a tick), so they
	// interleave with the writer without starving it.
	stop := make(chan struct{})
	ticks := make([]chan struct{}, 4)
	for i := range ticks {
		ticks[i] = make(chan struct{}, 1)
	}
	waitTick := func(i int) bool {
		select {
		case <-ticks[i]:
			return true
		case <-stop:
			return false
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for reader := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(reader)))
			for waitTick(reader) {
				g := uint32(rng.IntN(groups))
				first, last := w.FirstIndex(g), w.LastIndex(g)
				if last < first {
					continue
				}
				lo := first + rng.Uint64N(last-first+1)
				hi := lo + 1 + rng.Uint64N(last-lo+1)
				ents, err := w.Entries(g, lo, hi, rng.Uint64N(2000))
				if err == raft.ErrCompacted || err == raft.ErrUnavailable {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				for i, e := range ents {
					if e.GetIndex() != lo+uint64(i) || !bytes.Equal(e.GetData(), selfDescribing(g, e.GetIndex(), e.GetTerm())) {
						errc <- fmt.Errorf("group %d: Entries(%d, %d) returned %v at position %d", g, lo, hi, e, i)
						return
					}
				}
				if _, err := w.Term(g, lo); err != nil && err != raft.ErrCompacted && err != raft.ErrUnavailable {
					errc <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 99))
		for waitTick(3) {
			g := uint32(rng.IntN(groups))
			if last := w.LastIndex(g); last > 30 {
				w.Release(g, last-30)
			}
		}
	})

	rng := rand.New(rand.NewPCG(seed, 7))
	var b Batch
	terms := make([]uint64, groups)
	for range 2000 {
		b.Reset()
		for g := range uint32(groups) {
			first := w.LastIndex(g) + 1
			if rng.IntN(10) == 0 && first-w.FirstIndex(g) > 40 {
				first -= 1 + rng.Uint64N(5) // a conflicting tail, above what is released
				terms[g]++
			}
			ents := make([]*raftpb.Entry, 1+rng.IntN(4))
			for i := range ents {
				index := first + uint64(i)
				ents[i] = &raftpb.Entry{Index: new(index), Term: new(terms[g]), Data: selfDescribing(g, index, terms[g])}
			}
			b.Append(g, ents)
		}
		if err := w.Write(&b, rng.IntN(2) == 0); err != nil {
			t.Fatal(err)
		}
		for _, tick := range ticks {
			select {
			case tick <- struct{}{}:
			default:
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Recycled+st.Removed == 0 {
		t.Fatalf("no segment was retired: %+v", st)
	}
}
