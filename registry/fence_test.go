package registry

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/rpc"
)

// fences records the fences a Writer sends; fail makes one partition's
// fence fail.
type fences struct {
	mu   sync.Mutex
	got  []fence
	fail uint32
}

type fence struct {
	partition uint32
	service   string
	index     uint64
}

func (f *fences) FenceService(_ context.Context, p uint32, service string, index uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == f.fail {
		return rpc.ErrLostLeadership
	}
	f.got = append(f.got, fence{p, service, index})
	return nil
}

// sorted returns the fences by partition and clears them.
func (f *fences) sorted() []fence {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.got
	f.got = nil
	slices.SortFunc(out, func(a, b fence) int { return int(a.partition) - int(b.partition) })
	return out
}

// TestWriterFencesEveryPartition: a change is answered only after every
// partition was fenced at its index; a fence that fails makes the change
// answer a retry-safe ErrUnavailable; a removal of a missing service fences
// too (a retry after a half-done fan-out completes it).
func TestWriterFencesEveryPartition(t *testing.T) {
	reg := New(zerolog.Nop())
	reg.Start(&metaLog{db: newMetaDB(t), sm: reg, term: 1, leader: true})
	f := &fences{}
	w := Writer{Registry: reg, Fences: f, Partitions: 3}
	ctx := ctxT(t)

	if err := w.Put(ctx, &rpc.Service{Name: "Echo", Url: "http://127.0.0.1:9"}); err != nil {
		t.Fatal(err)
	}
	svc, _ := reg.Lookup("Echo")
	want := []fence{{1, "Echo", svc.GetRegisteredIndex()}, {2, "Echo", svc.GetRegisteredIndex()}, {3, "Echo", svc.GetRegisteredIndex()}}
	if got := f.sorted(); !slices.Equal(got, want) {
		t.Fatalf("put fenced %v, want %v", got, want)
	}

	f.fail = 2
	if err := w.Delete(ctx, "Echo"); !errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrLostLeadership) {
		t.Fatalf("delete with partition 2 failing: %v, want ErrUnavailable only", err)
	}
	if got := f.sorted(); len(got) != 2 {
		t.Fatalf("delete fenced %v, want partitions 1 and 3", got)
	}

	f.fail = 0
	if err := w.Delete(ctx, "Echo"); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("retried delete: %v, want ErrNotFound", err)
	}
	if got := f.sorted(); len(got) != 3 || got[0].index == 0 {
		t.Fatalf("retried delete fenced %v, want every partition at the index it was found missing", got)
	}
}
