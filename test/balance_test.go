package test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestLeaderBalancing runs three processes with the default flags (leader
// balancing is on by default): every group ends up led by its preferred
// node (group g by node g mod 3 + 1, the nodes being 1, 2, 3), leaves a
// node that shuts down and comes back to it after its restart, while a
// client that sends all along never sees an error: hand-offs are retried
// by the ingress.
func TestLeaderBalancing(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const groups = robustnessPartitions + 1 // partitions 1..4 and the metadata group 0
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions})
	rec := newRecorder(t)
	c.registerService(c.nodes[0], "Echo", rec.srv.URL)
	preferred := func(g uint32) uint64 { return uint64(g%3) + 1 }
	balanced := func() bool {
		ls := c.leaders()
		for g := uint32(0); g < groups; g++ {
			if ls[g] != preferred(g) {
				return false
			}
		}
		return true
	}
	// Elections put leaders anywhere; hand-offs start 5 s after each.
	testutil.WaitFor(t, 45*time.Second, "every group led by its preferred node", balanced)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent int
	var failures []string
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			r, err := do(context.Background(), http.MethodPost, c.nodes[0].ingressURL()+"/Echo/echo/send",
				[]byte(fmt.Sprintf(`"b%d"`, i)), map[string]string{"idempotency-key": fmt.Sprintf("balance-%d", i)})
			mu.Lock()
			sent++
			if err != nil || r.status != http.StatusAccepted {
				failures = append(failures, fmt.Sprintf("send %d: %v %+v", i, err, r))
			}
			mu.Unlock()
		}
	})

	// Node 3 shuts down: it hands its groups to the others, which keep them
	// while it is away and give them back once it replicates again.
	n3 := c.nodes[2]
	c.terminate(n3, 20*time.Second)
	testutil.WaitFor(t, 15*time.Second, "node 3's groups led elsewhere", func() bool {
		ls := c.leaders()
		for g := uint32(0); g < groups; g++ {
			if ls[g] == 0 || ls[g] == 3 {
				return false
			}
		}
		return true
	})
	c.restart(n3)
	testutil.WaitFor(t, 45*time.Second, "node 3's groups back with it", balanced)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if sent == 0 {
		t.Fatal("the client sent nothing")
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d sends failed across the hand-offs, first: %s", len(failures), sent, failures[0])
	}
	t.Logf("%d sends, all accepted, across two rounds of hand-offs", sent)
}
