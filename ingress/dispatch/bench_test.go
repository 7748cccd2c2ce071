package dispatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkStream measures requests per second over one stream with a
// trivial backend, for 64 and 512 concurrent callers:
//
//	go test -run '^$' -bench Stream -benchtime 2s ./ingress/dispatch
func BenchmarkStream(b *testing.B) {
	for _, callers := range []int{64, 512} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			nodes, _ := startNodes(b, 1, ServerConfig{})
			c := newTestClient(b, nodes, 1, func(cfg *ClientConfig) { cfg.Logger = zerolog.Nop() })
			inv := invoke(1)
			if _, err := c.Append(context.Background(), 1, inv); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
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
			if got := metricValue(c.metrics.opened); got != 1 {
				b.Fatalf("%v streams, want 1", got)
			}
		})
	}
}
