package test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// flowHold is how long each call of a limited service works, so that
// calls overlap and a limit has something to bound.
const flowHold = 20 * time.Millisecond

// TestFlowLimitsAcrossLeaderKill: a service with `concurrency: 3` and a
// service whose sends go through a scope with a rule of 2 each take
// flowSends sends through all three nodes; the leader of the most
// partitions is killed with SIGKILL mid-run and restarted. Neither
// service ever sees more calls at once than its limit, and every send is
// one invocation with exactly its own result.
func TestFlowLimitsAcrossLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	c := startCluster(t, clusterOpts{nodes: 3})
	limited := newFlowService(t, flowHold)
	scoped := newFlowService(t, flowHold)
	// A short attempt timeout: a new leader waits that long before it
	// delivers again what the killed one had under way.
	c.registerFlow("Limited", limitsJSON(limited.srv.URL, `"limits":{"concurrency":3},"retry":{"attemptTimeout":"2s"}`))
	c.registerFlow("Scoped", limitsJSON(scoped.srv.URL, `"retry":{"attemptTimeout":"2s"}`))
	c.setRule("checkout", 2)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var limitedIDs, scopedIDs []string
	sent := make(chan struct{}, 2)
	go func() {
		limitedIDs = sendAll(ctx, t, c, flowSends,
			func(int) string { return "/restate/send/Limited/run" },
			func(i int) string { return fmt.Sprintf("l-%d", i) })
		sent <- struct{}{}
	}()
	go func() {
		scopedIDs = sendAll(ctx, t, c, flowSends,
			func(int) string { return "/restate/scope/checkout/send/Scoped/run" },
			func(i int) string { return fmt.Sprintf("s-%d", i) })
		sent <- struct{}{}
	}()

	testutil.WaitFor(t, 60*time.Second, "a third of each service's invocations delivered", func() bool {
		return limited.seen() >= flowSends/3 && scoped.seen() >= flowSends/3
	})
	victim := c.leaderOfMost()
	c.kill(victim)
	l, s := limited.seen(), scoped.seen()
	t.Logf("killed node %d (leader of the most partitions) with %d and %d of %d delivered", victim.id, l, s, flowSends)
	testutil.WaitFor(t, 60*time.Second, "deliveries after the kill", func() bool {
		return limited.seen() >= l+10 && scoped.seen() >= s+10
	})
	c.restart(victim)
	<-sent
	<-sent

	testutil.WaitFor(t, 3*time.Minute, "every invocation delivered", func() bool {
		return limited.seen() == flowSends && scoped.seen() == flowSends
	})
	checkExactlyOnce(ctx, t, c, limited, limitedIDs)
	checkExactlyOnce(ctx, t, c, scoped, scopedIDs)
	lp, sp := limited.peakInFlight(), scoped.peakInFlight()
	t.Logf("peak in flight: %d (concurrency 3), %d (scope rule 2); deliveries: %d and %d for %d invocations each",
		lp, sp, len(limited.arrived()), len(scoped.arrived()), flowSends)
	if lp > 3 {
		t.Errorf("the service with concurrency 3 had %d calls in flight at once", lp)
	}
	if sp > 2 {
		t.Errorf("the scope with a rule of 2 had %d calls in flight at once", sp)
	}
}

// TestFlowRateAndLimitBelowPartitions: a service with `ratePerSecond: 50`
// and `burst: 10` never sees more than 60 starts in any one-second window
// (sliding over its arrival times); a service with `concurrency: 1` over
// two partitions holds exactly: one call at a time (the partitions' shares
// can be 0 and add up to the limit; docs/operations.md, "Protecting
// services").
func TestFlowRateAndLimitBelowPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const rate, burst = 50, 10
	c := startCluster(t, clusterOpts{nodes: 3, partitions: 2})
	paced := newFlowService(t, 0)
	single := newFlowService(t, flowHold)
	c.registerFlow("Paced", limitsJSON(paced.srv.URL, fmt.Sprintf(`"limits":{"ratePerSecond":%d,"burst":%d}`, rate, burst)))
	c.registerFlow("Single", limitsJSON(single.srv.URL, `"limits":{"concurrency":1}`))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var pacedIDs, singleIDs []string
	sent := make(chan struct{})
	go func() {
		singleIDs = sendAll(ctx, t, c, flowSingleSends,
			func(int) string { return "/restate/send/Single/run" },
			func(i int) string { return fmt.Sprintf("one-%d", i) })
		close(sent)
	}()
	pacedIDs = sendAll(ctx, t, c, flowRateSends,
		func(int) string { return "/restate/send/Paced/run" },
		func(i int) string { return fmt.Sprintf("p-%d", i) })
	<-sent
	testutil.WaitFor(t, 3*time.Minute, "every invocation delivered", func() bool {
		return paced.seen() == flowRateSends && single.seen() == flowSingleSends
	})
	checkExactlyOnce(ctx, t, c, paced, pacedIDs)
	checkExactlyOnce(ctx, t, c, single, singleIDs)

	as := paced.arrived()
	most := maxInWindow(as, time.Second)
	span := as[len(as)-1].at.Sub(as[0].at)
	t.Logf("rate %d/s, burst %d: at most %d starts in a second; %d starts over %v (%.1f/s)",
		rate, burst, most, len(as), span.Round(time.Millisecond), float64(len(as)-1)/span.Seconds())
	if most > rate+burst {
		t.Errorf("%d starts within one second, want at most rate + burst = %d", most, rate+burst)
	}
	peak := single.peakInFlight()
	t.Logf("concurrency 1 over 2 partitions: peak in flight %d", peak)
	if peak > 1 {
		t.Errorf("concurrency 1 over 2 partitions had %d calls in flight, want at most 1", peak)
	}
}

// setRule creates the scope rule pattern with a concurrency limit through
// node 1 and waits until every node holds it.
func (c *cluster) setRule(pattern string, concurrency int) {
	c.t.Helper()
	body := []byte(fmt.Sprintf(`{"concurrency":%d}`, concurrency))
	r, err := do(context.Background(), http.MethodPut, c.nodes[0].adminURL()+"/rules/"+pattern, body, nil)
	if err != nil || r.status != http.StatusCreated {
		c.t.Fatalf("PUT /rules/%s: %v %v", pattern, r, err)
	}
	for _, n := range c.nodes {
		testutil.WaitFor(c.t, 10*time.Second, fmt.Sprintf("node %d holds rule %s", n.id, pattern), func() bool {
			r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/rules/"+pattern, nil, nil)
			return err == nil && r.status == http.StatusOK
		})
	}
}

// TestFlowRateFollowsTheBacklog: a rate is split among the partitions as
// a concurrency limit is, so one key's backlog, all in one partition of
// two, runs at the service's whole rate once the split moved to it (with
// a static split it ran at half), and still no second sees more than the
// rate plus the burst.
func TestFlowRateFollowsTheBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const rate, burst, sends = 40, 4, 320
	c := startCluster(t, clusterOpts{nodes: 3, partitions: 2})
	svc := newFlowService(t, 0)
	c.registerFlow("PacedKey", limitsJSON(svc.srv.URL, fmt.Sprintf(`"kind":"object","shared":["get"],"limits":{"ratePerSecond":%d,"burst":%d}`, rate, burst)))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ids := sendAll(ctx, t, c, sends,
		func(int) string { return "/restate/send/PacedKey/one/get" },
		func(i int) string { return fmt.Sprintf("k-%d", i) })
	testutil.WaitFor(t, 2*time.Minute, "every invocation delivered", func() bool { return svc.seen() == sends })
	checkExactlyOnce(ctx, t, c, svc, ids)
	as := svc.arrived()
	most := maxInWindow(as, time.Second)
	half := as[len(as)/2:]
	span := half[len(half)-1].at.Sub(half[0].at)
	got := float64(len(half)-1) / span.Seconds()
	t.Logf("rate %d/s over 2 partitions, one key: the second half ran at %.1f/s; at most %d starts in a second", rate, got, most)
	if most > rate+burst {
		t.Errorf("%d starts within one second, want at most rate + burst = %d", most, rate+burst)
	}
	if got < 0.75*rate {
		t.Errorf("one partition's backlog ran at %.1f/s, want near the whole rate %d/s (a static split gives %d/s)", got, rate, rate/2)
	}
}
