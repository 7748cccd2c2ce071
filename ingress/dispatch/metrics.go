package dispatch

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// serverMetrics are a Server's collectors (one set per Server, registered
// on its Registerer when there is one).
type serverMetrics struct {
	requests   *children[prometheus.Counter] // op, code
	inFlight   prometheus.Gauge
	streams    prometheus.Gauge
	overloaded prometheus.Counter
	seconds    *children[prometheus.Observer] // op
	// framesReceived and framesSent count gRPC messages on dispatch
	// streams: one per request or answer on Stream, one per batch on
	// Batches.
	framesReceived prometheus.Counter
	framesSent     prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer, log zerolog.Logger) *serverMetrics {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftgate_dispatch_server_requests_total",
		Help: "Dispatch requests answered by this node, by operation and answer code (ok or a DispatchError code).",
	}, []string{"op", "code"})
	seconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "raftgate_dispatch_server_request_seconds",
		Help:    "Time from receiving a dispatch request to queueing its answer.",
		Buckets: dispatchBuckets,
	}, []string{"op"})
	m := &serverMetrics{
		requests: newChildren(requests.WithLabelValues),
		seconds:  newChildren(seconds.WithLabelValues),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "raftgate_dispatch_server_in_flight",
			Help: "Dispatch requests being handled by this node.",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "raftgate_dispatch_server_streams",
			Help: "Open dispatch streams.",
		}),
		overloaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_server_overloaded_total",
			Help: "Dispatch requests refused with OVERLOADED because an in-flight bound was reached.",
		}),
		framesReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_server_frames_received_total",
			Help: "gRPC messages received on dispatch streams (a batch of requests counts once).",
		}),
		framesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_server_frames_sent_total",
			Help: "gRPC messages sent on dispatch streams (a batch of answers counts once).",
		}),
	}
	register(reg, log, requests, m.inFlight, m.streams, m.overloaded, seconds, m.framesReceived, m.framesSent)
	return m
}

// clientMetrics are a Client's collectors.
type clientMetrics struct {
	calls     *children[prometheus.Counter]  // op, result
	retries   *children[prometheus.Counter]  // reason
	seconds   *children[prometheus.Observer] // op
	inFlight  prometheus.Gauge
	opened    prometheus.Counter
	legacy    prometheus.Counter // opened as Stream: the node serves no Batches
	broken    prometheus.Counter
	dropped   prometheus.Counter
	overloads prometheus.Counter
	local     prometheus.Counter
}

func newClientMetrics(reg prometheus.Registerer, log zerolog.Logger) *clientMetrics {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftgate_dispatch_client_calls_total",
		Help: "Dispatch calls by operation and result (ok, or the error kind the caller got).",
	}, []string{"op", "result"})
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftgate_dispatch_client_retries_total",
		Help: "Dispatch attempts that were retried, by reason.",
	}, []string{"reason"})
	seconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "raftgate_dispatch_client_call_seconds",
		Help:    "Duration of dispatch calls, retries included.",
		Buckets: dispatchBuckets,
	}, []string{"op"})
	m := &clientMetrics{
		calls:   newChildren(calls.WithLabelValues),
		retries: newChildren(retries.WithLabelValues),
		seconds: newChildren(seconds.WithLabelValues),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "raftgate_dispatch_client_in_flight",
			Help: "Dispatch attempts waiting for an answer, all nodes.",
		}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_client_streams_opened_total",
			Help: "Dispatch streams opened.",
		}),
		legacy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_client_legacy_streams_opened_total",
			Help: "Dispatch streams opened one message per request because the node serves no batched stream (an older release).",
		}),
		broken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_client_streams_broken_total",
			Help: "Dispatch streams that broke (every request in flight on them was retried).",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_client_dropped_responses_total",
			Help: "Answers for correlation ids nobody waited for any more.",
		}),
		overloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_client_overloaded_total",
			Help: "Calls refused at once because a node's in-flight bound was reached.",
		}),
		local: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_dispatch_client_local_attempts_total",
			Help: "Attempts run in process on this node's own backend (it led the partition), without a dispatch stream.",
		}),
	}
	register(reg, log, calls, retries, seconds, m.inFlight, m.opened, m.legacy, m.broken, m.dropped, m.overloads, m.local)
	return m
}

// register registers collectors, tolerating a registry that already has
// them (a second client or server in one process keeps its own, unexported
// counts).
func register(reg prometheus.Registerer, log zerolog.Logger, cs ...prometheus.Collector) {
	if reg == nil {
		return
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				log.Warn().Err(err).Msg("registering dispatch metrics")
			}
		}
	}
}

// children caches a metric vector's children by label values. Every
// request counts itself under its operation and outcome, and
// WithLabelValues validates, hashes and locks on each call; a map lookup
// under a read lock costs a fraction of that. Vectors with one label use
// the first value only.
type children[M any] struct {
	with func(...string) M
	mu   sync.RWMutex
	m    map[[2]string]M
}

func newChildren[M any](with func(...string) M) *children[M] {
	return &children[M]{with: with, m: make(map[[2]string]M)}
}

func (c *children[M]) get(a, b string) M {
	k := [2]string{a, b}
	c.mu.RLock()
	m, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return m
	}
	if b == "" {
		m = c.with(a)
	} else {
		m = c.with(a, b)
	}
	c.mu.Lock()
	c.m[k] = m
	c.mu.Unlock()
	return m
}

// dispatchBuckets double from 0.5 ms to 33 s, so that a quantile read from
// them is within a factor of two.
var dispatchBuckets = prometheus.ExponentialBuckets(0.0005, 2, 17)
