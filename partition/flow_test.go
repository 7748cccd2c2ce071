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

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	"golang.org/x/time/rate"
)

// flowServices is a ServiceLookup with FlowRules.
type flowServices struct {
	staticServices
	rules map[string]*rpc.Rule
}

func (f flowServices) Registered(name string) (*rpc.Service, bool) {
	svc, ok := f.staticServices[name]
	return svc, ok
}

func (f flowServices) RuleFor(scope string) (*rpc.Rule, bool) {
	if r, ok := f.rules[scope]; ok && scope != "" {
		return r, true
	}
	return nil, false
}

func (f flowServices) HasRules() bool { return len(f.rules) > 0 }

// The shares of a limit add up to it (a share is at least 1).
func TestShareAddsUpToTheLimit(t *testing.T) {
	for parts := uint32(1); parts <= 9; parts++ {
		for n := uint32(1); n <= 40; n++ {
			sum := 0
			for p := uint32(1); p <= parts; p++ {
				s := share(n, parts, p)
				if s < 1 {
					t.Fatalf("share(%d, %d, %d) = %d", n, parts, p, s)
				}
				sum += s
			}
			if want := int(max(n, parts)); sum != want {
				t.Fatalf("limit %d over %d partitions: shares add up to %d, want %d", n, parts, sum, want)
			}
		}
	}
}

// Round robin across groups: at every point, no group with items left was
// served two fewer times than another; order within a group holds; the
// last group served carries over to a rebuilt queue.
func TestFairQueueRoundRobin(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("RAFTGATE_SEED"), 10, 64); err == nil {
		seed = s // replay: RAFTGATE_SEED=N
	}
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	for round := 0; round < 200; round++ {
		q := newFairQueue[int]()
		groups := 1 + rnd.IntN(8)
		left := make(map[string]int)
		next := make(map[string]int)
		for i := 0; i < 1+rnd.IntN(60); i++ {
			g := "g" + strconv.Itoa(rnd.IntN(groups))
			q.push(g, 0, next[g])
			next[g]++
			left[g]++
		}
		served := make(map[string]int)
		last := ""
		for {
			var got string
			item, ok := q.next(&last, func(int) bool { return true })
			if !ok {
				break
			}
			got = last
			if item != served[got] {
				t.Fatalf("seed %d: group %s served item %d, want %d (order within a group)", seed, got, item, served[got])
			}
			served[got]++
			left[got]--
			for g, n := range left {
				if n > 0 && served[g] < served[got]-1 {
					t.Fatalf("seed %d: group %s served %d times while %s (%d left) was served %d", seed, got, served[got], g, n, served[g])
				}
			}
		}
		for g, n := range left {
			if n != 0 {
				t.Fatalf("seed %d: group %s has %d left", seed, g, n)
			}
		}
	}
}

// A hot group cannot hold back a cold one, a refused head blocks only its
// group, and the rotation goes on from the group served last when the
// queue is built again (each scan builds one).
func TestFairQueueHotKeyAndRefusals(t *testing.T) {
	build := func() *fairQueue[string] {
		q := newFairQueue[string]()
		for i := range 1000 {
			q.push("hot", 0, "h"+strconv.Itoa(i))
		}
		q.push("cold", 0, "c0")
		q.push("refused", 0, "r0")
		return q
	}
	last := ""
	q := build()
	admit := func(s string) bool { return s != "r0" }
	a, _ := q.next(&last, admit)
	b, _ := q.next(&last, admit)
	if a != "c0" || b != "h0" {
		t.Fatalf("first two admitted %s %s, want c0 h0 (sorted groups, cold first)", a, b)
	}
	if c, _ := q.next(&last, admit); c != "h1" {
		t.Fatalf("third %s, want h1 (refused passed over, cold empty)", c)
	}
	// A new scan's queue: the rotation continues after "hot".
	q = build()
	if d, _ := q.next(&last, admit); d != "c0" {
		t.Fatalf("after a rebuild %s, want c0 (rotation continues past hot)", d)
	}
}

// Over any window of one second, a bucket grants at most rate + burst.
func TestTokenBucketWindow(t *testing.T) {
	iv := &invoker{buckets: make(map[string]*rate.Limiter)}
	spec := bucketSpec{name: "s", rate: 50, burst: 10}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var grants []time.Time
	for ms := 0; ms < 10_000; ms++ {
		now := start.Add(time.Duration(ms) * time.Millisecond)
		for {
			ok, at := iv.takeTokens([]bucketSpec{spec}, now)
			if !ok {
				if !at.After(now) {
					t.Fatalf("refused with the next token at %v, not after %v", at, now)
				}
				break
			}
			grants = append(grants, now)
		}
	}
	if len(grants) < 450 {
		t.Fatalf("%d grants in 10 s at 50/s", len(grants))
	}
	j := 0
	for i := range grants {
		for grants[i].Sub(grants[j]) >= time.Second {
			j++
		}
		if n := i - j + 1; n > 60 {
			t.Fatalf("%d grants within one second, want at most 60", n)
		}
	}
	if !grants[0].After(start) {
		t.Fatal("a new bucket granted at once: it starts empty")
	}
}

// limitedCluster is a one-partition cluster over a blocking recording
// service registered with limits.
func limitedCluster(t *testing.T, n int, svc *rpc.Service, clock *manualClock) (*fakeCluster, *recordingService) {
	rs := newRecordingService(t)
	rs.block = make(chan struct{})
	svc.Url = rs.srv.URL
	c := newFakeCluster(t, n, func(_ int, cfg *Config) {
		cfg.Services = flowServices{staticServices: staticServices{svc.Name: svc}}
		if clock != nil {
			cfg.Clock = clock.Now
		}
	})
	return c, rs
}

func (s *recordingService) inFlight() (now, most, ids int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight, s.maxInfl, len(s.deliveries)
}

func appendInvokes(t *testing.T, p *Processor, n int, setup func(i int, inv *rpc.Invoke)) {
	t.Helper()
	for i := range n {
		inv := newInvoke("limited", i)
		if setup != nil {
			setup(i, inv)
		}
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
	}
}

// A service's concurrency, its handler's and a scope rule's each hold:
// never more calls under way than the smallest that applies.
func TestConcurrencyLimitsHeld(t *testing.T) {
	for _, tc := range []struct {
		name  string
		svc   *rpc.Service
		scope string
		want  int
	}{
		{"service", &rpc.Service{Name: "limited", Limits: &rpc.Limits{Concurrency: 3}}, "", 3},
		{"handler", &rpc.Service{Name: "limited", HandlerConfig: []*rpc.HandlerConfig{{Handler: "greet", Limits: &rpc.Limits{Concurrency: 2}}}}, "", 2},
		{"scope", &rpc.Service{Name: "limited"}, "checkout", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rs := limitedCluster(t, 1, tc.svc, nil)
			if tc.scope != "" {
				c.replicas[0].p.cfg.Services = flowServices{staticServices: staticServices{"limited": tc.svc},
					rules: map[string]*rpc.Rule{tc.scope: {Pattern: tc.scope, Concurrency: 4, Enabled: true}}}
			}
			c.setLeader(0, false)
			p := c.replicas[0].p
			appendInvokes(t, p, 20, func(_ int, inv *rpc.Invoke) { inv.Scope = tc.scope })
			testutil.WaitFor(t, 10*time.Second, "the limit reached", func() bool { n, _, _ := rs.inFlight(); return n == tc.want })
			// Further scans start nothing more while all are blocked.
			for range 3 {
				var wg sync.WaitGroup
				p.invoker.scan(ctxT(t), &wg)
			}
			if n, _, _ := rs.inFlight(); n != tc.want {
				t.Fatalf("%d under way, limit %d", n, tc.want)
			}
			close(rs.block)
			testutil.WaitFor(t, 20*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
			if _, most, ids := rs.inFlight(); most != tc.want || ids != 20 {
				t.Fatalf("at most %d under way (limit %d), %d delivered", most, tc.want, ids)
			}
		})
	}
}

// perKeyConcurrency holds per key of a keyed service's shared handler, and
// a hot key does not hold back a cold one.
func TestPerKeyConcurrencyAndFairness(t *testing.T) {
	svc := &rpc.Service{Name: "limited", Kind: rpc.Service_OBJECT, Shared: []string{"greet"}, PerKeyConcurrency: 2,
		Limits: &rpc.Limits{Concurrency: 3}}
	c, rs := limitedCluster(t, 1, svc, nil)
	c.setLeader(0, false)
	p := c.replicas[0].p
	appendInvokes(t, p, 30, func(_ int, inv *rpc.Invoke) { keyed(inv, "hot") })
	appendInvokes(t, p, 1, func(_ int, inv *rpc.Invoke) { keyed(inv, "cold") })
	testutil.WaitFor(t, 10*time.Second, "three under way", func() bool { n, _, _ := rs.inFlight(); return n == 3 })
	rs.mu.Lock()
	var cold bool
	for _, h := range rs.headers {
		cold = cold || h.Get("x-raftgate-key") == "cold"
	}
	rs.mu.Unlock()
	p.invoker.mu.Lock()
	perKey := map[string]int{}
	for _, cs := range p.invoker.holding {
		for _, c := range cs {
			perKey[c]++
		}
	}
	p.invoker.mu.Unlock()
	if perKey["k\x00limited\x00hot"] != 2 || perKey["k\x00limited\x00cold"] != 1 {
		t.Fatalf("under way per key %v (cold delivered: %v), want hot 2 and cold 1", perKey, cold)
	}
	close(rs.block)
	testutil.WaitFor(t, 20*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
}

func keyed(inv *rpc.Invoke, key string) {
	id := invocation.RandomKeyed(inv.Service, key)
	inv.InvocationId, inv.Key = id.Bytes(), key
}

// A new leader counts what the old one marked under way, from state: it
// starts nothing of a full limit until the marks end, then delivers them
// again.
func TestNewLeaderCountsMarksFromState(t *testing.T) {
	clock := newManualClock()
	svc := &rpc.Service{Name: "limited", Limits: &rpc.Limits{Concurrency: 2}}
	c, rs := limitedCluster(t, 3, svc, clock)
	c.setLeader(0, false)
	appendInvokes(t, c.replicas[0].p, 6, nil)
	testutil.WaitFor(t, 10*time.Second, "two under way", func() bool { n, _, _ := rs.inFlight(); return n == 2 })
	c.waitApplied()
	c.setLeader(1, true)
	p := c.replicas[1].p
	testutil.WaitFor(t, 10*time.Second, "the new leader holds the marks", func() bool {
		p.invoker.mu.Lock()
		defer p.invoker.mu.Unlock()
		return len(p.invoker.held) == 2
	})
	for range 3 {
		var wg sync.WaitGroup
		p.invoker.scan(ctxT(t), &wg)
	}
	if _, _, ids := rs.inFlight(); ids != 2 {
		t.Fatalf("the new leader started more: %d invocations delivered, limit 2 held by the old leader's marks", ids)
	}
	close(rs.block)
	clock.Advance(6 * time.Second) // past the marks (attempt timeout 5 s)
	testutil.WaitFor(t, 20*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
	if _, most, ids := rs.inFlight(); most > 2 || ids != 6 {
		t.Fatalf("at most %d under way (limit 2), %d delivered", most, ids)
	}
}

// With priorities, each admission takes the head of the highest priority,
// the first such group after the one served last (round robin among
// equals), and order within a group holds: checked against a plain model
// of that rule over seeded random queues.
func TestFairQueuePriority(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("RAFTGATE_SEED"), 10, 64); err == nil {
		seed = s // replay: RAFTGATE_SEED=N
	}
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 2))
	type item struct {
		group string
		prio  int32
		seq   int
	}
	for round := 0; round < 200; round++ {
		q := newFairQueue[item]()
		model := map[string][]item{}
		var names []string
		groups := 1 + rnd.IntN(8)
		for i := range 1 + rnd.IntN(60) {
			g := "g" + strconv.Itoa(rnd.IntN(groups))
			it := item{group: g, prio: int32(rnd.IntN(3)) - 1, seq: i}
			if _, ok := model[g]; !ok {
				names = append(names, g)
			}
			q.push(g, it.prio, it)
			model[g] = append(model[g], it)
		}
		slices.Sort(names)
		last := ""
		for {
			// The model: the best head priority, then the first group
			// holding it after last, in sorted order, wrapping.
			var want *item
			start, found := slices.BinarySearch(names, last)
			if found {
				start++
			}
			for i := range names {
				items := model[names[(start+i)%len(names)]]
				if len(items) > 0 && (want == nil || items[0].prio > want.prio) {
					want = &items[0]
				}
			}
			got, ok := q.next(&last, func(item) bool { return true })
			if want == nil {
				if ok {
					t.Fatalf("seed %d: got %v from an empty queue", seed, got)
				}
				break
			}
			if !ok || got != *want {
				t.Fatalf("seed %d round %d: got %v (%v), want %v", seed, round, got, ok, *want)
			}
			model[got.group] = model[got.group][1:]
		}
		if q.len() != 0 {
			t.Fatalf("seed %d: %d left", seed, q.len())
		}
	}
}

// A refused high-priority head blocks only its group: the next priority
// goes on, and the refused group's later items wait behind its head.
func TestFairQueuePriorityRefused(t *testing.T) {
	q := newFairQueue[string]()
	q.push("high", 10, "h0")
	q.push("high", 10, "h1")
	q.push("low", -5, "l0")
	q.push("mid", 0, "m0")
	last := ""
	var got []string
	for {
		s, ok := q.next(&last, func(s string) bool { return s != "h0" })
		if !ok {
			break
		}
		got = append(got, s)
	}
	if want := []string{"m0", "l0"}; !slices.Equal(got, want) {
		t.Fatalf("admitted %v, want %v", got, want)
	}
}

// Deliveries with no key group by priority, so a high-priority one does
// not queue behind low-priority ones; a key keeps one group.
func TestFairGroupOfPriorities(t *testing.T) {
	plain := func(key, idem string, prio int32) string {
		return fairGroup(&rpc.Invoke{Service: "s", Key: key, IdempotencyKey: idem, Priority: prio})
	}
	if plain("", "", 5) == plain("", "", 0) {
		t.Fatal("keyless deliveries of different priorities share a group")
	}
	if plain("k", "", 5) != plain("k", "", 0) || plain("", "i", 5) != plain("", "i", 0) {
		t.Fatal("a key's deliveries of different priorities are in different groups")
	}
}

// A high-priority send goes before the low-priority ones that waited
// longer for the same limit.
func TestPriorityAdmittedFirst(t *testing.T) {
	c, rs := limitedCluster(t, 1, &rpc.Service{Name: "limited", Limits: &rpc.Limits{Concurrency: 1}}, nil)
	var mu sync.Mutex
	var order []string
	rs.answer = func(_ string, _ int, body []byte) (int, http.Header, []byte) {
		mu.Lock()
		order = append(order, string(body))
		mu.Unlock()
		return http.StatusOK, nil, nil
	}
	c.setLeader(0, false)
	p := c.replicas[0].p
	// One fairness group each: round robin alone would take the urgent
	// one (key "z") last.
	appendInvokes(t, p, 5, func(i int, inv *rpc.Invoke) { inv.IdempotencyKey = "k" + strconv.Itoa(i) })
	testutil.WaitFor(t, 10*time.Second, "one under way", func() bool { n, _, _ := rs.inFlight(); return n == 1 })
	appendInvokes(t, p, 1, func(_ int, inv *rpc.Invoke) { inv.Body, inv.Priority, inv.IdempotencyKey = []byte("urgent"), 10, "z" })
	close(rs.block)
	testutil.WaitFor(t, 20*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 6 || order[1] != "urgent" {
		t.Fatalf("delivered in the order %q, want the urgent one second (after the one under way)", order)
	}
}

// The cost of one scan's admissions: 128 picks among 10,000 waiting
// groups, with one priority (a pass per pick) and with several (a sort).
func BenchmarkFairQueueAdmit(b *testing.B) {
	for _, prios := range []int{1, 3} {
		b.Run("priorities="+strconv.Itoa(prios), func(b *testing.B) {
			for b.Loop() {
				q := newFairQueue[int]()
				for g := range 10_000 {
					q.push("g"+strconv.Itoa(g), int32(g%prios), g)
				}
				last := ""
				for range 128 {
					if _, ok := q.next(&last, func(int) bool { return true }); !ok {
						b.Fatal("empty")
					}
				}
			}
		})
	}
}
