package partition

import (
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/rpc"
)

const limitedKey = "s\x00limited"

// demandOf returns p's reported demand on limitedKey.
func demandOf(p *Processor) (*rpc.FlowDemand, bool) {
	r, ok := p.FlowReport()
	if !ok {
		return nil, false
	}
	for _, d := range r.Demand {
		if d.Key == limitedKey {
			return d, true
		}
	}
	return &rpc.FlowDemand{Key: limitedKey}, true
}

func scanTimes(t *testing.T, p *Processor, n int) {
	for range n {
		var wg sync.WaitGroup
		p.invoker.scan(ctxT(t), &wg)
	}
}

// A partition enforces the share it adopted through its log: 0 before
// any (partition 4's static part of 3 over 4 partitions), then a raise, a
// lowering that starts nothing more while more is in flight, a stale
// version ignored, and a new leader that reads the share from state and
// counts the old leader's marks.
func TestAdoptedShares(t *testing.T) {
	clock := newManualClock()
	svc := &rpc.Service{Name: "limited", Limits: &rpc.Limits{Concurrency: 3}}
	rs := newRecordingService(t)
	rs.block = make(chan struct{})
	svc.Url = rs.srv.URL
	c := newFakeCluster(t, 3, func(_ int, cfg *Config) {
		cfg.Services = flowServices{staticServices: staticServices{svc.Name: svc}}
		cfg.Clock = clock.Now
		cfg.Partitions, cfg.Partition = 4, 4
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	appendInvokes(t, p, 6, nil)
	testutil.WaitFor(t, 10*time.Second, "six reported waiting", func() bool {
		d, ok := demandOf(p)
		return ok && d.Waiting == 6
	})
	if d, _ := demandOf(p); d.InFlight != 0 || d.Adopted != 0 {
		t.Fatalf("with a static share of 0: %v", d)
	}
	if _, _, ids := rs.inFlight(); ids != 0 {
		t.Fatalf("%d delivered with a share of 0", ids)
	}

	adopt := func(p *Processor, version uint64, share uint32) {
		t.Helper()
		if err := p.AdoptShares(ctxT(t), []*rpc.AdoptShare{{Key: limitedKey, Version: version, Share: share}}); err != nil {
			t.Fatal(err)
		}
	}
	adopt(p, 1, 2)
	testutil.WaitFor(t, 10*time.Second, "two under way", func() bool { n, _, _ := rs.inFlight(); return n == 2 })
	adopt(p, 2, 1)
	testutil.WaitFor(t, 10*time.Second, "version 2 adopted", func() bool { v, _ := p.AdoptedShare(limitedKey); return v == 2 })
	adopt(p, 1, 3) // stale: ignored
	c.waitApplied()
	scanTimes(t, p, 3)
	if v, s := p.AdoptedShare(limitedKey); v != 2 || s != 1 {
		t.Fatalf("adopted version %d share %d, want 2 and 1", v, s)
	}
	if d, _ := demandOf(p); d.Adopted != 2 || d.InFlight != 2 || d.Waiting != 4 {
		t.Fatalf("after lowering to 1 with 2 under way: %v", d)
	}
	if _, _, ids := rs.inFlight(); ids != 2 {
		t.Fatalf("%d delivered after lowering the share to 1", ids)
	}

	// A new leader: the share from state, the marks counted.
	c.setLeader(1, true)
	q := c.replicas[1].p
	if v, s := q.AdoptedShare(limitedKey); v != 2 || s != 1 {
		t.Fatalf("the new leader's adopted version %d share %d, want 2 and 1", v, s)
	}
	testutil.WaitFor(t, 10*time.Second, "the new leader reports the marks", func() bool {
		d, ok := demandOf(q)
		return ok && d.InFlight == 2 && d.Adopted == 2
	})
	adopt(q, 3, 3)
	testutil.WaitFor(t, 10*time.Second, "a third delivery", func() bool { _, _, ids := rs.inFlight(); return ids == 3 })
	scanTimes(t, q, 3)
	if _, _, ids := rs.inFlight(); ids != 3 {
		t.Fatalf("%d delivered with share 3 and the old leader's 2 marks", ids)
	}
	close(rs.block)
	clock.Advance(6 * time.Second) // past the old leader's marks
	testutil.WaitFor(t, 20*time.Second, "all delivered", func() bool { return q.OutboxDepth() == 0 })
	if _, most, _ := rs.inFlight(); most > 3 {
		t.Fatalf("%d under way at once, share 3", most)
	}
}

// A rate is split as a concurrency limit is: partition 4 of 4 starts at a
// quarter of the rate, reports the deliveries its bucket holds under the
// rate's key, and runs at the whole rate once it adopted all of it.
func TestAdoptedRateShare(t *testing.T) {
	clock := newManualClock()
	svc := &rpc.Service{Name: "limited", Limits: &rpc.Limits{RatePerSecond: 10, Burst: 1}}
	rs := newRecordingService(t)
	svc.Url = rs.srv.URL
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = flowServices{staticServices: staticServices{svc.Name: svc}}
		cfg.Clock = clock.Now
		cfg.Partitions, cfg.Partition = 4, 4
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	appendInvokes(t, p, 200, nil)
	const rateKey = "S\x00limited"
	testutil.WaitFor(t, 10*time.Second, "the held deliveries reported under the rate's key", func() bool {
		r, ok := p.FlowReport()
		if !ok {
			return false
		}
		for _, d := range r.Demand {
			if d.Key == rateKey && d.Waiting > 0 && d.InFlight == 0 {
				return true
			}
		}
		return false
	})
	// Starts over 4 s of the manual clock, in 50 ms steps.
	startsOver4s := func() int {
		_, _, before := rs.inFlight()
		for range 80 {
			clock.Advance(50 * time.Millisecond)
			scanTimes(t, p, 1)
		}
		var after int
		testutil.WaitFor(t, 10*time.Second, "the started deliveries arrived", func() bool {
			_, _, after = rs.inFlight()
			p.invoker.mu.Lock()
			busy := len(p.invoker.inflight)
			p.invoker.mu.Unlock()
			return after > before && busy == 0
		})
		return after - before
	}
	if n := startsOver4s(); n < 8 || n > 12 {
		t.Fatalf("%d starts in 4 s with the static share (2.5/s), want about 10", n)
	}
	if err := p.AdoptShares(ctxT(t), []*rpc.AdoptShare{{Key: rateKey, Version: 1, Share: 10_000}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the rate adopted", func() bool { v, _ := p.AdoptedShare(rateKey); return v == 1 })
	if n := startsOver4s(); n < 36 || n > 42 {
		t.Fatalf("%d starts in 4 s with all of the rate (10/s), want about 40", n)
	}
}
