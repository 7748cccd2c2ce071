package ingress

import (
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestDurationBucketsResolveTheTail checks that a p99 read from the
// request histogram, the way the console and Prometheus'
// histogram_quantile read it (linear within a bucket), lands within 2.5 ms
// of the true p99 for latencies a healthy cluster sees (5 to 20 ms).
func TestDurationBucketsResolveTheTail(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	var samples []float64
	for i := 0; i < 3000; i++ {
		d := 5*time.Millisecond + time.Duration(i)*5*time.Microsecond // 5 to 20 ms
		m.observe(routeSend, 202, d)
		samples = append(samples, d.Seconds())
	}
	sort.Float64s(samples)
	want := samples[int(0.99*float64(len(samples)))-1]
	got := bucketQuantile(t, reg, "send", 0.99)
	if diff := got - want; diff > 0.0025 || diff < -0.0025 {
		t.Fatalf("p99 from the buckets is %.4f s, the samples' is %.4f s: the buckets are too coarse", got, want)
	}
}

// bucketQuantile reads quantile q of route's request histogram as
// histogram_quantile does.
func bucketQuantile(t *testing.T, reg *prometheus.Registry, route string, q float64) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h *dto.Histogram
	for _, f := range families {
		if f.GetName() != "raftgate_ingress_request_duration_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					h = metric.GetHistogram()
				}
			}
		}
	}
	if h == nil {
		t.Fatalf("no histogram for route %q", route)
	}
	rank := q * float64(h.GetSampleCount())
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		count := float64(b.GetCumulativeCount())
		if count >= rank {
			return lower + (b.GetUpperBound()-lower)*(rank-below)/(count-below)
		}
		lower, below = b.GetUpperBound(), count
	}
	t.Fatalf("rank %v beyond the last bucket", rank)
	return 0
}
