package partition

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
)

func TestRetryAfterHonoured(t *testing.T) {
	clock := newManualClock()
	svc := newRecordingService(t)
	svc.answer = func(id string, attempt int, body []byte) (int, http.Header, []byte) {
		if attempt == 1 {
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"30"}}, nil
		}
		return http.StatusOK, nil, body
	}
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = svc.lookup("greeter")
		cfg.Invoker.Retry.MaxRetryAfter = time.Minute
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	inv := newInvoke("greeter", 1)
	if _, err := p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	var rec *rpc.InvocationRecord
	testutil.WaitFor(t, 5*time.Second, "attempt 1 recorded", func() bool {
		r, err := p.Status(ctxT(t), inv.InvocationId)
		rec = r
		return err == nil && r.Attempts == 1
	})
	if wait := rec.RetryAtUnixMs - clock.Now().UnixMilli(); wait < 30_000 {
		t.Fatalf("retry in %d ms, Retry-After asked for 30 s", wait)
	}
	if !strings.Contains(rec.LastError, "429") {
		t.Fatalf("last error %q", rec.LastError)
	}
	clock.Advance(29 * time.Second)
	if _, err := p.Output(ctxT(t), inv.InvocationId); err == nil {
		t.Fatal("completed before Retry-After")
	}
	clock.Advance(2 * time.Second)
	if r := awaitOutput(t, p, inv.InvocationId).Result; r.Status != 200 || r.Attempts != 2 {
		t.Fatalf("result = %v", r)
	}
}

func TestTerminalFailuresRaftgateProduces(t *testing.T) {
	slow := newRecordingService(t)
	slow.block = make(chan struct{}) // never answers
	t.Cleanup(func() { close(slow.block) })
	big := newRecordingService(t)
	big.answer = func(string, int, []byte) (int, http.Header, []byte) {
		return 200, nil, bytes.Repeat([]byte("x"), 2048)
	}
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = staticServices{
			"slow":       {Name: "slow", Url: slow.srv.URL},
			"big":        {Name: "big", Url: big.srv.URL},
			"restricted": {Name: "restricted", Url: big.srv.URL, Handlers: []string{"other"}},
		}
		cfg.Invoker.Retry.AttemptTimeout = 50 * time.Millisecond
		cfg.Invoker.Retry.MaxAttempts = 2
		cfg.Invoker.MaxResultBytes = 1024
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	ids := map[string][]byte{}
	for _, name := range []string{"slow", "big", "restricted"} {
		inv := newInvoke(name, 0)
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		ids[name] = inv.InvocationId
	}
	for name, want := range map[string]struct {
		status   uint32
		attempts uint32
		text     string
	}{
		"slow":       {504, 2, "gave up after 2 attempts: no answer within"},
		"big":        {502, 1, "larger than 1024 bytes"},
		"restricted": {404, 1, "handler \"greet\""},
	} {
		r := awaitOutput(t, p, ids[name]).Result
		if r.Status != want.status || !r.Failed || r.Attempts != want.attempts || !strings.Contains(r.Error, want.text) {
			t.Errorf("%s: result %v, want status %d attempts %d error containing %q", name, r, want.status, want.attempts, want.text)
		}
	}
}

// A 20k backlog: the invoker holds at most Concurrency reservations and
// works through it page by page (checked over the first 2,000).
func TestLargeBacklogBounded(t *testing.T) {
	svc := newRecordingService(t)
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = svc.lookup("greeter")
		cfg.Invoker.Concurrency = 16
		cfg.Invoker.ScanLimit = 512
	})
	const backlog = 20000
	// Build the backlog straight into the log before anyone leads.
	for i := 0; i < backlog; i += 500 {
		var cmds []*rpc.Command
		for j := i; j < i+500; j++ {
			inv := newInvoke("greeter", j)
			inv.ProposedAtUnixMs = time.Now().UnixMilli()
			cmds = append(cmds, invokeCmd(inv))
		}
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			t.Fatal(err)
		}
		c.appendRaw(data)
	}
	c.waitApplied()
	p := c.replicas[0].p
	if d := p.OutboxDepth(); d != backlog {
		t.Fatalf("outbox depth %d", d)
	}
	maxReserved := 0
	c.setLeader(0, false)
	const done = 2000
	testutil.WaitFor(t, 60*time.Second, "2000 of the backlog done", func() bool {
		p.invoker.mu.Lock()
		maxReserved = max(maxReserved, len(p.invoker.inflight))
		p.invoker.mu.Unlock()
		return p.OutboxDepth() <= backlog-done
	})
	if maxReserved > 16 {
		t.Fatalf("%d reservations, limit 16", maxReserved)
	}
	if ids, _ := svc.total(); ids < done {
		t.Fatalf("service saw %d invocations", ids)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if svc.maxInfl > 16 {
		t.Fatalf("%d concurrent calls, limit 16", svc.maxInfl)
	}
}

// The invoker's scan starts after the deliveries under way at the head of
// the outbox, and reads again from where a delivery is queued behind
// them: here the next exclusive invocation of a key, queued (due at its
// acceptance) when the running one completes, before deliveries accepted
// later. The idle recheck is an hour, so only that brings it out.
func TestScanResumesWhereADeliveryIsQueued(t *testing.T) {
	clock := newManualClock()
	keyed := newOrderingService(t)
	plain := newRecordingService(t)
	plain.block = make(chan struct{})
	t.Cleanup(func() { close(plain.block) })
	services := staticServices{
		"Counter": {Name: "Counter", Url: keyed.srv.URL, Kind: rpc.Service_OBJECT},
		"greeter": {Name: "greeter", Url: plain.srv.URL},
	}
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = services
		cfg.Invoker.IdleRecheck = time.Hour
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	appendInv := func(inv *rpc.Invoke) {
		t.Helper()
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
	}
	keyedInv := func(id invocation.ID) *rpc.Invoke {
		return &rpc.Invoke{InvocationId: id[:], RequestId: invocation.NewRequestID(), Service: "Counter", Handler: "add", Key: "k", Exclusive: true}
	}
	first, second := invocation.RandomKeyed("Counter", "k"), invocation.RandomKeyed("Counter", "k")
	keyed.mu.Lock()
	keyed.holdFirst = first.String()
	keyed.mu.Unlock()
	appendInv(keyedInv(first))
	testutil.WaitFor(t, 10*time.Second, "first delivery", func() bool { return keyed.starts(first.String()) == 1 })
	appendInv(keyedInv(second)) // queued behind first, in the key
	clock.Advance(time.Second)
	for i := range 3 {
		appendInv(newInvoke("greeter", i))
	}
	testutil.WaitFor(t, 10*time.Second, "scan resumes after the deliveries under way", func() bool {
		plain.mu.Lock()
		inflight := plain.inflight
		plain.mu.Unlock()
		p.invoker.mu.Lock()
		defer p.invoker.mu.Unlock()
		return inflight == 3 && p.invoker.from != nil
	})
	close(keyed.release) // first completes: second is queued, due before the greeter deliveries
	testutil.WaitFor(t, 10*time.Second, "second delivery", func() bool { return keyed.starts(second.String()) == 1 })
}

// A delivery whose outcome could not be proposed is released and read
// again, though the scan had moved past it to deliveries under way.
func TestScanReadsAReleasedDeliveryAgain(t *testing.T) {
	clock := newManualClock()
	gate := make(chan struct{})
	svc := newRecordingService(t)
	slow := newRecordingService(t)
	slow.block = make(chan struct{})
	t.Cleanup(func() { close(slow.block) })
	first := newInvoke("greeter", 0)
	firstID := invocation.ID(first.InvocationId)
	svc.answer = func(id string, _ int, body []byte) (int, http.Header, []byte) {
		if id == firstID.String() {
			<-gate
		}
		return http.StatusOK, nil, body
	}
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = staticServices{"greeter": {Name: "greeter", Url: svc.srv.URL}, "slow": {Name: "slow", Url: slow.srv.URL}}
		cfg.Invoker.IdleRecheck = time.Hour
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	if _, err := p.Append(ctxT(t), first); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	for i := range 2 {
		if _, err := p.Append(ctxT(t), newInvoke("slow", i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "scan resumes after the deliveries under way", func() bool {
		slow.mu.Lock()
		inflight := slow.inflight
		slow.mu.Unlock()
		p.invoker.mu.Lock()
		defer p.invoker.mu.Unlock()
		return inflight == 2 && svc.count(firstID) == 1 && p.invoker.from != nil
	})
	// The log refuses proposals: first's Complete is refused until the
	// invoker gives up and releases it.
	c.mu.Lock()
	c.replicas[0].down = true
	c.mu.Unlock()
	close(gate)
	testutil.WaitFor(t, 10*time.Second, "first delivered again", func() bool { return svc.count(firstID) >= 2 })
	c.mu.Lock()
	c.replicas[0].down = false
	c.mu.Unlock()
	c.signal()
	awaitOutput(t, p, first.InvocationId)
}

// A follower's invoker does not run: it remembers no finished delivery
// (it would remember every one, for as long as it follows).
func TestFollowerInvokerKeepsNothing(t *testing.T) {
	svc := newRecordingService(t)
	c := newFakeCluster(t, 2, func(_ int, cfg *Config) { cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	for i := range 5 {
		inv := newInvoke("greeter", i)
		if _, err := c.replicas[0].p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		awaitOutput(t, c.replicas[0].p, inv.InvocationId)
	}
	c.waitApplied()
	iv := c.replicas[1].p.invoker
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if n := len(iv.done) + len(iv.inflight); n != 0 {
		t.Fatalf("the follower's invoker holds %d ids", n)
	}
}

// A wake-up by time scans the outbox from its first entry, so a delivery
// that a resumed scan passed over (here: a resume point moved past it by
// hand) still goes out within an IdleRecheck.
func TestTimedScanStartsAtTheFirstEntry(t *testing.T) {
	clock := newManualClock()
	svc := newRecordingService(t)
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = staticServices{"greeter": {Name: "greeter", Url: svc.srv.URL}}
		cfg.Invoker.IdleRecheck = 50 * time.Millisecond
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	inv := newInvoke("greeter", 0)
	inv.NotBeforeUnixMs = clock.Now().Add(time.Minute).UnixMilli()
	if _, err := p.Append(ctxT(t), inv); err != nil {
		t.Fatal(err)
	}
	p.invoker.mu.Lock()
	p.invoker.from = outbox.StartOf(clock.Now().Add(time.Hour).UnixMilli())
	p.invoker.mu.Unlock()
	clock.Advance(2 * time.Minute)
	testutil.WaitFor(t, 10*time.Second, "the delivery a resumed scan passed over", func() bool {
		return svc.count(invocation.ID(inv.InvocationId)) == 1
	})
}
