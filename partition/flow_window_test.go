package partition

import (
	"net/http"
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
	rs := newRecordingService(t)
	rs.block = make(chan struct{})
	svc.Url = rs.srv.URL
	var mu sync.Mutex
	var order []string
	rs.answer = func(_ string, _ int, body []byte) (int, http.Header, []byte) {
		mu.Lock()
		order = append(order, string(body))
		mu.Unlock()
		return http.StatusOK, nil, nil
	}
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = flowServices{staticServices: staticServices{svc.Name: svc}}
		cfg.Invoker.ScanLimit = scanLimit
	})
	c.setLeader(0, false)
	return c.replicas[0].p, rs, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
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
	scan()
	// It starts after the call under way (invoker.from).
	if walked, reads, _ := stats(); walked != hot-1 || reads != 1 {
		t.Fatalf("a scan over %d known hot deliveries walked %d keys and read %d records, want %d and 1 (the group's candidate)", hot-1, walked, reads, hot-1)
	}
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
	if walked, reads, _ := stats(); walked != hot || reads != 2 {
		t.Fatalf("with a cold key behind: walked %d, read %d, want %d and 2", walked, reads, hot)
	}
	close(rs.block)
	testutil.WaitFor(t, 30*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
	if _, _, known := stats(); known != 0 {
		t.Fatalf("%d deliveries still known after all were delivered", known)
	}

	// The walk is bounded: with ScanLimit 4, a scan stops after 4 records
	// or 4*scanWalkFactor keys, and the leader knows at most as many.
	p, rs, _ = windowCluster(t, &rpc.Service{Name: "limited", Kind: rpc.Service_OBJECT, Shared: []string{"greet"}, Limits: &rpc.Limits{Concurrency: 1}}, 4)
	iv = p.invoker
	appendInvokes(t, p, hot, func(i int, inv *rpc.Invoke) { keyed(inv, "hot") })
	testutil.WaitFor(t, 10*time.Second, "one hot call under way", func() bool { n, _, _ := rs.inFlight(); return n == 1 })
	for range 20 {
		scan()
		if walked, reads, known := stats(); walked > 4*scanWalkFactor || reads > 4 || known > 4*scanWalkFactor {
			t.Fatalf("ScanLimit 4: walked %d, read %d, knows %d", walked, reads, known)
		}
	}
	if walked, _, _ := stats(); walked != 4*scanWalkFactor {
		t.Fatalf("ScanLimit 4: walked %d keys of %d hot, want %d", walked, hot, 4*scanWalkFactor)
	}
	close(rs.block)
	testutil.WaitFor(t, 30*time.Second, "all delivered", func() bool { return p.OutboxDepth() == 0 })
}
