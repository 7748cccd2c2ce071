package dispatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/raftgate/raftgate/rpc"
)

// BenchmarkStream measures requests per second over one stream with a
// trivial backend, for 1, 64 and 512 concurrent callers, the process's CPU
// time (client and server together) per request and the requests and
// answers per frame:
//
//	go test -run '^$' -bench Stream -benchtime 2s -benchmem ./ingress/dispatch
func BenchmarkStream(b *testing.B) {
	for _, callers := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			nodes, _ := startNodes(b, 1, ServerConfig{})
			benchStream(b, nodes[0], callers)
		})
	}
}

// BenchmarkStreamToOlderServer is BenchmarkStream against a server that
// serves only the per-message Stream (a node of an older release): the
// cost of one gRPC message per request, measured in the same binary.
func BenchmarkStreamToOlderServer(b *testing.B) {
	for _, callers := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			benchStream(b, startOneNode(b, func(g *grpc.Server, s *Server) { rpc.RegisterDispatchServer(g, olderServer{s: s}) }), callers)
		})
	}
}

func benchStream(b *testing.B, node *testNode, callers int) {
	c := newTestClient(b, []*testNode{node}, 1, func(cfg *ClientConfig) { cfg.Logger = zerolog.Nop() })
	inv := invoke(1)
	if _, err := c.Append(context.Background(), 1, inv); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := c.Append(context.Background(), 1, inv); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	m := node.server.metrics
	b.ReportMetric(float64(b.N+1)/metricValue(m.framesReceived), "req/frame-in")
	b.ReportMetric(float64(b.N+1)/metricValue(m.framesSent), "resp/frame-out")
	if got := metricValue(c.metrics.opened); got != 1 {
		b.Fatalf("%v streams, want 1", got)
	}
}

// processCPU is the user+system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
