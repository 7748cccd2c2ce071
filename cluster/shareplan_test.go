package cluster

import (
	"math/rand/v2"
	"testing"

	"github.com/raftgate/raftgate/rpc"
)

// shareWorld simulates partitions under one limit: each enforces the share
// it adopted (the static split before any), admits what it may, completes
// some, and reports now and then (reports may be stale).
type shareWorld struct {
	parts    uint32
	n        uint32
	rec      *rpc.FlowShares
	adopted  []uint64 // version adopted per partition
	share    []int    // share enforced per partition
	inflight []int
	waiting  []int
	reports  []*Demand // last report taken per partition (nil: none)
}

func newShareWorld(parts, n uint32) *shareWorld {
	w := &shareWorld{parts: parts, n: n, adopted: make([]uint64, parts), share: make([]int, parts),
		inflight: make([]int, parts), waiting: make([]int, parts), reports: make([]*Demand, parts)}
	for i := range w.share {
		w.share[i] = int(StaticShare(n, parts, uint32(i+1)))
	}
	return w
}

func (w *shareWorld) plan(t *testing.T, reporting func(i int) bool) {
	t.Helper()
	l := ShareLimit{Key: "s\x00svc", Figure: w.n, Current: w.rec, Reports: map[uint32]Demand{}}
	for i, r := range w.reports {
		if r != nil && reporting(i) {
			l.Reports[uint32(i+1)] = *r
		}
	}
	next := PlanShares(w.parts, l)
	if next == nil {
		return
	}
	if err := checkShares(w.rec, next); err != nil {
		t.Fatalf("plan refused: %v (from %v to %v)", err, w.rec, next)
	}
	w.rec = nextShares(w.rec, next)
}

func (w *shareWorld) adopt(i int) {
	if w.rec != nil && w.rec.Parts[i].Version > w.adopted[i] {
		w.adopted[i], w.share[i] = w.rec.Parts[i].Version, int(w.rec.Parts[i].Share)
	}
}

func (w *shareWorld) admit(i int) {
	if add := min(w.waiting[i], w.share[i]-w.inflight[i]); add > 0 {
		w.inflight[i] += add
		w.waiting[i] -= add
	}
}

func (w *shareWorld) report(i int) {
	w.reports[i] = &Demand{Adopted: w.adopted[i], InFlight: uint32(w.inflight[i]), Waiting: uint32(w.waiting[i])}
}

func (w *shareWorld) check(t *testing.T, step int) {
	t.Helper()
	total := 0
	for _, x := range w.inflight {
		total += x
	}
	if total > int(w.n) {
		t.Fatalf("step %d: %d in flight, limit %d (inflight %v, shares %v, record %v)", step, total, w.n, w.inflight, w.share, w.rec)
	}
	if w.rec == nil {
		return
	}
	var shares, ceilings int
	for i, p := range w.rec.Parts {
		shares += int(p.Share)
		ceilings += int(p.Ceiling)
		if p.Share > p.Ceiling || w.inflight[i] > int(p.Ceiling) {
			t.Fatalf("step %d: partition %d: share %d, ceiling %d, in flight %d", step, i+1, p.Share, p.Ceiling, w.inflight[i])
		}
	}
	if shares > int(w.n) || ceilings > int(w.n) {
		t.Fatalf("step %d: shares add up to %d, ceilings to %d, limit %d", step, shares, ceilings, w.n)
	}
}

// TestPlanSharesHoldsTheLimit: whatever partitions report (late, stale or
// not at all), adopt and do, the deliveries in flight never exceed the
// figure, nor do the recorded shares or ceilings.
func TestPlanSharesHoldsTheLimit(t *testing.T) {
	for seed := range uint64(300) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		w := newShareWorld(uint32(1+rnd.IntN(8)), uint32(1+rnd.IntN(12)))
		for step := range 300 {
			i := rnd.IntN(int(w.parts))
			switch rnd.IntN(6) {
			case 0:
				w.plan(t, func(int) bool { return rnd.IntN(3) > 0 })
			case 1:
				w.adopt(i)
			case 2:
				w.waiting[i] += rnd.IntN(5)
				w.admit(i)
			case 3:
				w.inflight[i] -= rnd.IntN(w.inflight[i] + 1)
				w.admit(i)
			case 4, 5:
				w.report(i)
			}
			w.check(t, step)
		}
	}
}

// settle runs rounds in which every partition completes what it had in
// flight, adopts, admits and reports promptly.
func (w *shareWorld) settle(t *testing.T, rounds int) {
	for range rounds {
		for i := range w.share {
			w.inflight[i] = 0
			w.adopt(i)
			w.admit(i)
			w.report(i)
		}
		w.plan(t, func(int) bool { return true })
		w.check(t, 0)
	}
}

// TestPlanSharesMovesToDemand: an idle partition's share flows to the
// busy one, and busy partitions share fairly (each at least one).
func TestPlanSharesMovesToDemand(t *testing.T) {
	for seed := range uint64(100) {
		rnd := rand.New(rand.NewPCG(seed, 11))
		parts, n := uint32(2+rnd.IntN(7)), uint32(1+rnd.IntN(12))
		w := newShareWorld(parts, n)
		hot := rnd.IntN(int(parts))
		w.waiting[hot] = 1000
		w.settle(t, 10)
		if w.inflight[hot] != int(n) {
			t.Fatalf("seed %d: P=%d N=%d: the only busy partition has %d in flight, shares %v", seed, parts, n, w.inflight[hot], w.rec.GetParts())
		}
		// A second partition becomes as busy: they end up within one of
		// each other.
		other := (hot + 1) % int(parts)
		w.waiting[other] = 1000
		w.settle(t, 10)
		if a, b := w.inflight[hot], w.inflight[other]; a+b != int(n) || a-b > 1 || b-a > 1 || n >= 2 && (a == 0 || b == 0) {
			t.Fatalf("seed %d: P=%d N=%d: two busy partitions hold %d and %d", seed, parts, n, a, b)
		}
	}
}

// TestPlanSharesKeepsIdleShares: with nothing waiting, nothing moves.
func TestPlanSharesKeepsIdleShares(t *testing.T) {
	w := newShareWorld(4, 3)
	w.settle(t, 3)
	if w.rec != nil {
		t.Fatalf("a split was recorded with nothing waiting: %v", w.rec)
	}
}
