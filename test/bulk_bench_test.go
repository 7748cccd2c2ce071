package test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// BenchmarkBulkCancelUnrelatedLatency measures what a bulk cancel of a
// large backlog costs other traffic: one node, RAFTGATE_BULK_N (default
// 100000) delayed sends of service Backlog (pending, never delivered),
// then the latency of calls to another service, Echo, at a steady
// concurrency: for as long as the bulk cancel of the backlog runs, and
// for as long again before it (the baseline). docs/benchmarks.md, "Bulk
// actions". Run: go test ./test -run '^$' -bench BulkCancel -benchtime 1x
func BenchmarkBulkCancelUnrelatedLatency(b *testing.B) {
	n := 100_000
	if s := os.Getenv("RAFTGATE_BULK_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	c := startCluster(b, clusterOpts{nodes: 1})
	node := c.nodes[0]
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }))
	b.Cleanup(echo.Close)
	for _, name := range []string{"Backlog", "Echo"} {
		if r, err := do(context.Background(), http.MethodPut, node.adminURL()+"/services/"+name, []byte(`{"url":"`+echo.URL+`"}`), nil); err != nil || r.status/100 != 2 {
			b.Fatalf("register %s: %v %+v", name, err, r)
		}
	}
	// The backlog: delayed an hour, so nothing delivers them.
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				r, err := do(context.Background(), http.MethodPost, node.ingressURL()+"/Backlog/run/send?delay=1h", []byte(`{}`), nil)
				if err != nil || r.status != http.StatusAccepted {
					b.Errorf("send: %v %+v", err, r)
					return
				}
			}
		})
	}
	wg.Wait()
	b.Logf("%d delayed sends in %v", n, time.Since(start).Round(time.Millisecond))

	// Unrelated traffic: calls to Echo from 4 clients, latencies recorded
	// per phase.
	var phase atomic.Int32 // 0 warm-up, 1 baseline, 2 during the bulk, 3 stop
	lat := [3][]time.Duration{}
	var mu sync.Mutex
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var traffic sync.WaitGroup
	for range 4 {
		traffic.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				r, err := do(ctx, http.MethodPost, node.ingressURL()+"/Echo/run", []byte(`{}`), nil)
				d := time.Since(t0)
				if ctx.Err() != nil {
					return
				}
				if err != nil || r.status != http.StatusOK {
					b.Errorf("call: %v %+v", err, r)
					return
				}
				if p := phase.Load(); p < 3 {
					mu.Lock()
					lat[p] = append(lat[p], d)
					mu.Unlock()
				}
			}
		})
	}
	timer := time.NewTimer(2 * time.Second)
	<-timer.C // warm-up
	phase.Store(1)
	b.ResetTimer()

	// The bulk runs in its own phase; the baseline phase lasts as long.
	baselineStart := time.Now()
	timer.Reset(5 * time.Second)
	<-timer.C
	baseline := time.Since(baselineStart)
	phase.Store(2)
	bulkStart := time.Now()
	var op struct {
		Operation string `json:"operation"`
		Matched   uint64 `json:"matched"`
	}
	if s := postJSON(b, node.adminURL()+"/invocations/bulk", `{"action":"cancel","filter":{"service":"Backlog"}}`, &op); s != http.StatusOK {
		b.Fatalf("bulk cancel: %d", s)
	}
	var st bulkOp
	testutil.WaitFor(b, 2*time.Minute, "bulk cancel done", func() bool {
		return getJSON(b, node.adminURL()+"/operations/"+op.Operation, &st) == http.StatusOK && st.Done
	})
	bulkTook := time.Since(bulkStart)
	phase.Store(3)
	stop()
	traffic.Wait()
	if st.Applied != uint64(n) {
		b.Fatalf("cancelled %d of %d", st.Applied, n)
	}
	p := func(ds []time.Duration, q float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(float64(len(ds))*q))]
	}
	b.ReportMetric(float64(bulkTook.Milliseconds()), "bulk-ms")
	b.ReportMetric(float64(n)/bulkTook.Seconds(), "cancelled/s")
	for i, name := range []string{"", "baseline", "during"} {
		if i == 0 {
			continue
		}
		b.ReportMetric(float64(p(lat[i], 0.5).Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(p(lat[i], 0.99).Microseconds())/1000, name+"-p99-ms")
		b.ReportMetric(float64(p(lat[i], 1).Microseconds())/1000, name+"-max-ms")
	}
	fmt.Fprintf(os.Stderr, "baseline %v: %d calls; bulk cancel of %d took %v: %d calls\n", baseline.Round(time.Millisecond), len(lat[1]), n, bulkTook.Round(time.Millisecond), len(lat[2]))
}
