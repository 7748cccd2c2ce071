package test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestFlowHotKeyDoesNotStarveColdKey: an object's shared handler under
// `concurrency: 4` gets flowHotSends sends to one hot key, then one send
// to a cold key of the same partition, while the service holds its first
// calls so that the hot backlog is all queued. Deliveries held by the limit are
// admitted round robin across keys, so the cold key's invocation does not
// wait for the hot backlog: fewer than half of the hot deliveries still
// queued when it was sent go before it (a FIFO would put all of them
// first). The test reports the cold key's delay from send to arrival.
func TestFlowHotKeyDoesNotStarveColdKey(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	c := startCluster(t, clusterOpts{nodes: 3, partitions: keyedPartitions})
	svc := newFlowService(t, 0)
	// The service holds its first calls until the cold key's send, so
	// the whole hot backlog is queued behind them when it comes.
	gate := make(chan struct{})
	svc.mu.Lock()
	svc.gate = gate
	svc.mu.Unlock()
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	// The attempt timeout outlasts the sending of the backlog, so the
	// held calls are not retried meanwhile.
	c.registerFlow("Hot", limitsJSON(svc.srv.URL, `"kind":"object","shared":["get"],"limits":{"concurrency":4},"retry":{"attemptTimeout":"2m"}`))
	cold := ""
	for i := 0; cold == ""; i++ {
		if k := fmt.Sprintf("cold-%d", i); partitionOfKey("Hot", k) == partitionOfKey("Hot", "hot") {
			cold = k
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sendStart := time.Now()
	sendAll(ctx, t, c, flowHotSends,
		func(int) string { return "/restate/send/Hot/hot/get" },
		func(i int) string { return fmt.Sprintf("h-%d", i) })
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d sends to the hot key accepted in %v", flowHotSends, time.Since(sendStart).Round(time.Millisecond))

	sentAt := time.Now()
	open()
	r, err := postRaw(ctx, c, 0, "/restate/send/Hot/"+cold+"/get", `{"cold":true}`, nil)
	if err != nil || r.status != http.StatusAccepted {
		t.Fatalf("send to the cold key: %v %v", r, err)
	}
	coldID := r.header.Get("x-restate-id")
	testutil.WaitFor(t, 5*time.Minute, "the cold key's invocation delivered", func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return svc.deliveries[coldID] > 0
	})
	testutil.WaitFor(t, 10*time.Minute, "the hot backlog delivered", func() bool { return svc.seen() == flowHotSends+1 })

	var coldAt, lastHot time.Time
	before, ahead := map[string]bool{}, map[string]bool{}
	for _, a := range svc.arrived() {
		switch {
		case a.id == coldID:
			if coldAt.IsZero() {
				coldAt = a.at
			}
		case a.at.Before(sentAt):
			before[a.id] = true
		case coldAt.IsZero():
			ahead[a.id] = true
			lastHot = a.at
		default:
			lastHot = a.at
		}
	}
	queued := flowHotSends - len(before)
	t.Logf("cold key delayed %v from send to arrival: %d hot deliveries went first of the %d still queued when it was sent; the hot backlog took %v more to deliver",
		coldAt.Sub(sentAt).Round(time.Millisecond), len(ahead), queued, lastHot.Sub(sentAt).Round(time.Millisecond))
	// When the queued hot deliveries first arrived: a slow drain, or a
	// few that waited (an attempt timeout, a mark of an earlier leader)?
	var hotAt []time.Duration
	firstAt := map[string]bool{}
	for _, a := range svc.arrived() {
		if a.id != coldID && !before[a.id] && !firstAt[a.id] {
			firstAt[a.id] = true
			hotAt = append(hotAt, a.at.Sub(sentAt))
		}
	}
	if n := len(hotAt); n > 0 {
		slices.Sort(hotAt)
		t.Logf("queued hot deliveries' first arrivals after the cold send: 50%% by %v, 90%% by %v, 99%% by %v, all %d by %v",
			hotAt[n/2].Round(time.Millisecond), hotAt[n*9/10].Round(time.Millisecond), hotAt[n*99/100].Round(time.Millisecond), n, hotAt[n-1].Round(time.Millisecond))
	}
	if 2*len(ahead) >= queued {
		t.Errorf("%d of the %d queued hot deliveries went before the cold key's: it waited for the hot backlog", len(ahead), queued)
	}
}
