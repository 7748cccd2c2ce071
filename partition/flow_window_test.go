package partition

import (
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/rpc"
)

// windowCluster is a one-replica cluster over a blocking recording service
// registered with svc, with a small ScanLimit; order records the keys in
// the order their calls arrived.
func windowCluster(t *testing.T, svc *rpc.Service, scanLimit int) (*Processor, *recordingService, func() []string) {
	rs, order := orderedService(t, svc)
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = flowServices{staticServices: staticServices{svc.Name: svc}}
		cfg.Invoker.ScanLimit = scanLimit
		cfg.Invoker.IdleRecheck = time.Hour // no timed full walk amid a test's scans
	})
	c.setLeader(0, false)
	return c.replicas[0].p, rs, order
}

// orderedService is a blocking recording service for svc whose order
// returns the bodies of the calls answered, in the order they arrived.
func orderedService(t *testing.T, svc *rpc.Service) (rs *recordingService, order func() []string) {
	rs = newRecordingService(t)
	rs.block = make(chan struct{})
	svc.Url = rs.srv.URL
	var mu sync.Mutex
	var got []string
	rs.answer = func(_ string, _ int, body []byte) (int, http.Header, []byte) {
		mu.Lock()
		got = append(got, string(body))
		mu.Unlock()
		return http.StatusOK, nil, nil
	}
	return rs, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// A hot key's held backlog many times ScanLimit long does not hide a cold
// key's delivery queued behind it: under `concurrency: 1`, the cold key
// goes right after the hot call under way when it was queued (round
// robin), not after the hot backlog shrank below ScanLimit.
func TestHotKeyBeyondScanLimitDoesNotHideColdKey(t *testing.T) {
	svc := &rpc.Service{Name: "limited", Kind: rpc.Service_OBJECT, Shared: []string{"greet"}, Limits: &rpc.Limits{Concurrency: 1}}
	p, rs, order := windowCluster(t, svc, 16)
	const hot = 100
	appendInvokes(t, p, hot, func(i int, inv *rpc.Invoke) { keyed(inv, "hot"); inv.Body = []byte("hot " + strconv.Itoa(i)) })
	testutil.WaitFor(t, 10*time.Second, "one hot call under way", func() bool { n, _, _ := rs.inFlight(); return n == 1 })
	appendInvokes(t, p, 1, func(_ int, inv *rpc.Invoke) { keyed(inv, "cold"); inv.Body = []byte("cold") })
	close(rs.block)
	testutil.WaitFor(t, 30*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
	got := order()
	at := slices.Index(got, "cold")
	if at < 0 || at > 2 {
		t.Fatalf("the cold key went %dth of %d (ScanLimit 16, %d hot queued ahead): want within the first 3", at+1, len(got), hot)
	}
	if _, most, ids := rs.inFlight(); most != 1 || ids != hot+1 {
		t.Fatalf("at most %d under way (limit 1), %d delivered, want %d", most, ids, hot+1)
	}
}

// Once the leader knows a hot key's held backlog, a scan passes over it
// from its keys: it reads the records of the group's candidates and of
// new deliveries only, walks at most ScanLimit*scanWalkFactor keys, and
// forgets each delivery when its outcome applies.
func TestScanPassesOverKnownHeldBacklog(t *testing.T) {
	svc := &rpc.Service{Name: "limited", Kind: rpc.Service_OBJECT, Shared: []string{"greet"}, Limits: &rpc.Limits{Concurrency: 1}}
	p, rs, _ := windowCluster(t, svc, 16)
	iv := p.invoker
	const hot = 100
	appendInvokes(t, p, hot, func(i int, inv *rpc.Invoke) { keyed(inv, "hot"); inv.Body = []byte("hot " + strconv.Itoa(i)) })
	testutil.WaitFor(t, 10*time.Second, "one hot call under way", func() bool { n, _, _ := rs.inFlight(); return n == 1 })
	stats := func() (walked, reads, known int) {
		iv.mu.Lock()
		defer iv.mu.Unlock()
		return iv.lastWalk, iv.lastReads, len(iv.known)
	}
	scan := func() {
		var wg sync.WaitGroup
		iv.scan(ctxT(t), &wg)
	}
	testutil.WaitFor(t, 10*time.Second, "the hot backlog known", func() bool {
		scan()
		_, _, known := stats()
		return known == hot
	})
	// A walk passes over the known backlog from its keys; it starts after
	// the call under way (invoker.from). The next scan jumps the stretch
	// that walk found (skiprun.go). (The invoker's loop may scan too, and
	// move from or the run meanwhile: the test waits for a scan of each.)
	testutil.WaitFor(t, 10*time.Second, "a walk reading only the group's candidate", func() bool {
		iv.mu.Lock()
		iv.dropRun()
		iv.mu.Unlock()
		scan()
		walked, reads, _ := stats()
		t.Logf("walk: %d keys walked, %d records read", walked, reads)
		return walked == hot-1 && reads == 1
	})
	testutil.WaitFor(t, 10*time.Second, "a jump over the backlog", func() bool {
		scan()
		walked, reads, _ := stats()
		t.Logf("with a skip run: %d keys walked, %d records read", walked, reads)
		return walked == 1 && reads == 1
	})
	heldBy := map[string]int{}
	list, err := p.List(ctxT(t), &rpc.ListInvocations{Service: "limited", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range list.Records {
		heldBy[rpc.InvocationRecord_State_name[int32(rec.State)]+"/"+rec.HeldBy]++
	}
	if heldBy["RUNNING/"] != 1 || heldBy["PENDING/"+heldByService] != hot-1 {
		t.Fatalf("listing by state/heldBy: %v, want 1 running and %d held by %q", heldBy, hot-1, heldByService)
	}
	if got := promtest.ToFloat64(p.metrics.waiting); got != hot-1 {
		t.Fatalf("waiting for a limit: %v, want %d", got, hot-1)
	}
	appendInvokes(t, p, 1, func(_ int, inv *rpc.Invoke) { keyed(inv, "cold") })
	scan()
	// (A run the cold key was queued into is dropped: the scan walks.)
	if walked, reads, _ := stats(); walked > hot || reads != 2 {
		t.Fatalf("with a cold key behind: walked %d, read %d, want at most %d and 2", walked, reads, hot)
	}
	close(rs.block)
	testutil.WaitFor(t, 30*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
	if _, _, known := stats(); known != 0 {
		t.Fatalf("%d deliveries still known after all were delivered", known)
	}

	// The walk is bounded: with ScanLimit 4, a scan reads at most 4
	// records and walks at most 4*scanWalkFactor keys, and the leader
	// knows at most as many deliveries; the skip run carries the walk
	// further at each scan, to the cold key behind the backlog.
	p, rs, order := windowCluster(t, &rpc.Service{Name: "limited", Kind: rpc.Service_OBJECT, Shared: []string{"greet"}, Limits: &rpc.Limits{Concurrency: 1}}, 4)
	iv = p.invoker
	appendInvokes(t, p, hot, func(i int, inv *rpc.Invoke) { keyed(inv, "hot"); inv.Body = []byte("hot " + strconv.Itoa(i)) })
	testutil.WaitFor(t, 10*time.Second, "one hot call under way", func() bool { n, _, _ := rs.inFlight(); return n == 1 })
	appendInvokes(t, p, 1, func(_ int, inv *rpc.Invoke) { keyed(inv, "cold"); inv.Body = []byte("cold") })
	for range hot {
		scan()
		if walked, reads, known := stats(); walked > 4*scanWalkFactor || reads > 4 || known > 4*scanWalkFactor {
			t.Fatalf("ScanLimit 4: walked %d, read %d, knows %d", walked, reads, known)
		}
	}
	close(rs.block)
	testutil.WaitFor(t, 30*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
	if got := order(); slices.Index(got, "cold") > 2 {
		t.Fatalf("ScanLimit 4: the cold key went %dth behind %d hot", slices.Index(got, "cold")+1, hot)
	}
}

// Seeded: keys of random sizes in random order under `concurrency: 2`, a
// small ScanLimit, scans that build and jump skip runs, then pending
// deliveries cancelled (outcomes this leader did not deliver, in the
// runs), retries (entries moved), and a cold key last. Whatever the runs
// skip: the limit holds, every delivery not cancelled is made once per
// attempt, none cancelled is made, and the cold key goes within a round
// of the keys.
func TestSkipRunsKeepDeliveries(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("RAFTGATE_SEED"), 10, 64); err == nil {
		seed = s // replay: RAFTGATE_SEED=N
	}
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 3))
	for round := range 2 {
		svc := &rpc.Service{Name: "limited", Kind: rpc.Service_OBJECT, Shared: []string{"greet"}, Limits: &rpc.Limits{Concurrency: 2}}
		// Reads for every group's two candidates (groupCap) and more: a
		// walk of 8*ScanLimit keys reaches past some of the backlogs.
		p, rs, _ := windowCluster(t, svc, 32+rnd.IntN(8))
		fails := map[string]bool{} // bodies whose first attempt fails
		var mu sync.Mutex
		var got []string // bodies as delivered
		rs.answer = func(id string, attempt int, body []byte) (int, http.Header, []byte) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(body))
			if fails[string(body)] && attempt == 1 {
				return http.StatusInternalServerError, nil, nil
			}
			return http.StatusOK, nil, nil
		}
		keys := 1 + rnd.IntN(6)
		bodyOf := map[string]string{} // by invocation id
		var bodies []string
		for i := range 80 + rnd.IntN(150) {
			key := "hot"
			if rnd.IntN(4) == 0 {
				key = "k" + strconv.Itoa(rnd.IntN(keys))
			}
			body := key + "/" + strconv.Itoa(i)
			appendInvokes(t, p, 1, func(_ int, inv *rpc.Invoke) {
				keyed(inv, key)
				inv.Body = []byte(body)
				bodyOf[string(inv.InvocationId)] = body
			})
			mu.Lock()
			fails[body] = rnd.IntN(10) == 0
			mu.Unlock()
			bodies = append(bodies, body)
		}
		testutil.WaitFor(t, 10*time.Second, "two under way", func() bool { n, _, _ := rs.inFlight(); return n == 2 })
		for range 20 {
			var wg sync.WaitGroup
			p.invoker.scan(ctxT(t), &wg)
		}
		// Cancel some that wait, found by their body in the listing.
		list, err := p.List(ctxT(t), &rpc.ListInvocations{Service: "limited", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		cancelled := map[string]bool{}
		for _, rec := range list.Records {
			if rec.State == rpc.InvocationRecord_PENDING && rnd.IntN(8) == 0 {
				if err := p.Cancel(ctxT(t), []byte("cancel-"+strconv.Itoa(len(cancelled))), rec.Invoke.InvocationId); err != nil {
					t.Fatal(err)
				}
				cancelled[bodyOf[string(rec.Invoke.InvocationId)]] = true
			}
			if rec.State == rpc.InvocationRecord_PENDING {
				var wg sync.WaitGroup
				p.invoker.scan(ctxT(t), &wg)
			}
		}
		appendInvokes(t, p, 1, func(_ int, inv *rpc.Invoke) { keyed(inv, "cold"); inv.Body = []byte("cold") })
		close(rs.block)
		testutil.WaitFor(t, 60*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
		mu.Lock()
		delivered := slices.Clone(got)
		mu.Unlock()
		seen := map[string]int{}
		for _, b := range delivered {
			seen[b]++
		}
		for _, b := range bodies {
			want := 1
			if fails[b] {
				want = 2
			}
			if cancelled[b] {
				want = 0
			}
			if seen[b] != want {
				t.Fatalf("seed %d round %d: %s delivered %d times, want %d", seed, round, b, seen[b], want)
			}
		}
		if _, most, _ := rs.inFlight(); most > 2 {
			t.Fatalf("seed %d round %d: %d under way, limit 2", seed, round, most)
		}
		// The cold key goes within a few rounds of the other keys (after
		// the two under way), though the backlog ahead of it is longer
		// than a walk (8*ScanLimit keys): the skip runs carry the walk
		// further at each scan.
		if at := slices.Index(delivered, "cold"); at < 0 || at >= 2+3*(keys+1) {
			t.Fatalf("seed %d round %d: the cold key went %dth: %v", seed, round, at+1, delivered[:min(len(delivered), at+1)])
		}
	}
}

// A new leader builds its own scan window (known groups, skip run:
// leader-local), counts the old leader's mark from state (nothing starts
// until it ends), and reaches the cold key behind the hot backlog within
// a few scans: it goes first once the mark is over.
func TestScanWindowAcrossLeaderChange(t *testing.T) {
	clock := newManualClock()
	svc := &rpc.Service{Name: "limited", Kind: rpc.Service_OBJECT, Shared: []string{"greet"}, Limits: &rpc.Limits{Concurrency: 1}}
	rs, order := orderedService(t, svc)
	c := newFakeCluster(t, 3, func(_ int, cfg *Config) {
		cfg.Services = flowServices{staticServices: staticServices{svc.Name: svc}}
		cfg.Clock = clock.Now
		cfg.Invoker.ScanLimit = 16
	})
	c.setLeader(0, false)
	old := c.replicas[0].p
	const hot = 100
	appendInvokes(t, old, hot, func(i int, inv *rpc.Invoke) { keyed(inv, "hot"); inv.Body = []byte("hot " + strconv.Itoa(i)) })
	testutil.WaitFor(t, 10*time.Second, "one hot call under way", func() bool { n, _, _ := rs.inFlight(); return n == 1 })
	testutil.WaitFor(t, 10*time.Second, "the old leader's scan window built", func() bool {
		var wg sync.WaitGroup
		old.invoker.scan(ctxT(t), &wg)
		old.invoker.mu.Lock()
		defer old.invoker.mu.Unlock()
		return len(old.invoker.known) == hot && old.invoker.skip != nil
	})
	c.waitApplied()
	c.setLeader(1, true)
	p := c.replicas[1].p
	testutil.WaitFor(t, 10*time.Second, "the new leader holds the old mark", func() bool {
		p.invoker.mu.Lock()
		defer p.invoker.mu.Unlock()
		return len(p.invoker.held) == 1
	})
	appendInvokes(t, p, 1, func(_ int, inv *rpc.Invoke) { keyed(inv, "cold"); inv.Body = []byte("cold") })
	for range 5 { // nothing starts while the old mark holds the limit
		var wg sync.WaitGroup
		p.invoker.scan(ctxT(t), &wg)
	}
	if _, _, ids := rs.inFlight(); ids != 1 {
		t.Fatalf("%d invocations delivered while the old leader's mark held the limit", ids)
	}
	// The old leader's call ends, then its mark: only then may the new
	// leader start anything (concurrency 1).
	close(rs.block)
	testutil.WaitFor(t, 10*time.Second, "the old call over", func() bool { n, _, _ := rs.inFlight(); return n == 0 })
	clock.Advance(6 * time.Second) // past the mark (attempt timeout 5 s)
	testutil.WaitFor(t, 30*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
	// The old leader's call was cut when it lost leadership (unanswered:
	// not in order); the new leader goes round robin from its first scan,
	// the cold key's group sorting first.
	if got := order(); slices.Index(got, "cold") != 0 {
		t.Fatalf("the cold key went %dth: %v", slices.Index(got, "cold")+1, got[:min(len(got), 5)])
	}
	if _, most, _ := rs.inFlight(); most != 1 {
		t.Fatalf("%d under way, limit 1", most)
	}
}
