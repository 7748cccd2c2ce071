package ingress

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the ingress's Prometheus metrics. A nil *metrics records
// nothing.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	// counters caches the counter of each (route, code) so that the hot
	// path neither hashes label values nor allocates.
	counters [routeHealth + 1][600]atomic.Pointer[prometheus.Counter]
	// observers caches the histogram of each route.
	observers [routeHealth + 1]prometheus.Observer
}

// newMetrics registers the metrics; inFlight reports the requests being
// served (read at scrape time, so it costs the hot path nothing).
func newMetrics(reg prometheus.Registerer, inFlight func() float64) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "raftgate", Subsystem: "ingress", Name: "requests_total",
			Help: "Ingress HTTP requests by route and status code (499: the client went away).",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "raftgate", Subsystem: "ingress", Name: "request_duration_seconds",
			Help: "Ingress HTTP request latency by route.",
			// Every 2.5 ms from 5 to 20 ms, where a healthy cluster's p50
			// and p99 lie, so that a quantile read from them (the
			// console's, histogram_quantile's) is that close.
			Buckets: []float64{.001, .0025, .005, .0075, .01, .0125, .015, .0175, .02, .025, .035, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
	}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "raftgate", Subsystem: "ingress", Name: "in_flight_requests",
		Help: "Requests being served (shed with 429 beyond the concurrency limit).",
	}, inFlight)
	for _, c := range []prometheus.Collector{m.requests, m.duration, gauge} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for k := routeOther; k <= routeHealth; k++ {
		m.observers[k] = m.duration.WithLabelValues(k.label())
	}
	return m, nil
}

// observe records one request.
func (m *metrics) observe(k routeKind, code int, elapsed time.Duration) {
	if m == nil {
		return
	}
	if k > routeHealth {
		k = routeOther
	}
	if code < 0 || code >= len(m.counters[k]) {
		code = 0
	}
	slot := &m.counters[k][code]
	c := slot.Load()
	if c == nil {
		counter := m.requests.WithLabelValues(k.label(), strconv.Itoa(code))
		slot.CompareAndSwap(nil, &counter)
		c = slot.Load()
	}
	(*c).Inc()
	m.observers[k].Observe(elapsed.Seconds())
}
