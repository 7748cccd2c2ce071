package partition

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// BenchmarkScanBacklog is the cost of one invoker scan over 10,000 due
// deliveries that cannot start, on a one-node cluster (real raftlog and
// bbolt): unlimited, a service without limits at its ServiceConcurrency
// (1), passed over from the keys alone; hotkey, one key of an object's
// shared handler under `concurrency: 1`, held by the limit.
func BenchmarkScanBacklog(b *testing.B) {
	const backlog = 10_000
	for _, name := range []string{"unlimited", "hotkey"} {
		b.Run(name, func(b *testing.B) {
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			b.Cleanup(srv.Close)
			b.Cleanup(func() { close(release) })
			c := newRaftCluster(b, 1, func(cfg *Config) {
				cfg.Services = registry.InvokerLookup{Registry: cfg.Services.(freshRegistry).reg}
				cfg.Invoker.IdleRecheck = time.Hour // scans run from the benchmark alone
				cfg.Invoker.ServiceConcurrency = 1
				cfg.Invoker.Retry.AttemptTimeout = time.Hour
			})
			svc := &rpc.Service{Name: "S", Url: srv.URL}
			if name == "hotkey" {
				svc.Kind, svc.Shared, svc.Limits = rpc.Service_OBJECT, []string{"get"}, &rpc.Limits{Concurrency: 1}
			}
			c.register(b, svc)
			key := ""
			if name == "hotkey" {
				key = "hot"
			}
			c.submitGets(b, backlog, key)
			var p *Processor
			testutil.WaitFor(b, 20*time.Second, "the backlog queued", func() bool {
				if n := c.partitionLeader(); n != nil {
					p = n.proc
				}
				return p != nil && p.OutboxDepth() == backlog
			})
			scan := func() {
				var wg sync.WaitGroup
				p.invoker.scan(b.Context(), &wg)
			}
			for range 10 { // as the leader would have, while the backlog came
				scan()
			}
			b.ResetTimer()
			for b.Loop() {
				scan()
			}
		})
	}
}

// BenchmarkHotKeyDrain is the rate at which a hot key's backlog, queued
// while the service held its calls, drains under `concurrency: 4` on a
// one-node cluster: every completion starts a scan over what is left.
// Run it with -benchtime 1x (each run queues its backlog afresh).
func BenchmarkHotKeyDrain(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run("backlog="+strconv.Itoa(n), func(b *testing.B) {
			gate := make(chan struct{})
			var seen atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-gate
				seen.Add(1)
			}))
			b.Cleanup(srv.Close)
			c := newRaftCluster(b, 1, func(cfg *Config) {
				cfg.Services = registry.InvokerLookup{Registry: cfg.Services.(freshRegistry).reg}
				cfg.Invoker.Retry.AttemptTimeout = time.Hour
			})
			c.register(b, &rpc.Service{Name: "S", Url: srv.URL, Kind: rpc.Service_OBJECT, Shared: []string{"get"}, Limits: &rpc.Limits{Concurrency: 4}})
			c.submitGets(b, n, "hot")
			b.ResetTimer()
			start := time.Now()
			close(gate)
			testutil.WaitFor(b, 5*time.Minute, "the backlog delivered", func() bool { return seen.Load() >= int64(n) })
			b.StopTimer()
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}

// submitGets appends n invocations of S/get (of key, or unkeyed when key
// is empty) through the cluster and waits until all are accepted.
func (c *raftCluster) submitGets(b *testing.B, n int, key string) {
	invs := make([]*rpc.Invoke, n)
	for i := range invs {
		inv := &rpc.Invoke{RequestId: invocation.NewRequestID(), Service: "S", Handler: "get", Key: key, Body: []byte(strconv.Itoa(i))}
		id := invocation.Random()
		if key != "" {
			id = invocation.RandomKeyed("S", key)
		}
		inv.InvocationId = id[:]
		invs[i] = inv
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, wait := c.submitting(b, ctx, invs, 64)
	wait()
}
