package partition

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/raftgate/raftgate/outbox"
)

// Results and deliveries are counted by outcome, on every replica.
func TestResultAndDeliveryCounters(t *testing.T) {
	svc := newRecordingService(t)
	svc.answer = func(_ string, _ int, body []byte) (int, http.Header, []byte) {
		if string(body) == "hello 1" {
			return http.StatusBadRequest, nil, nil // a terminal failure: a failed result
		}
		return http.StatusOK, nil, body
	}
	c := newFakeCluster(t, 2, func(_ int, cfg *Config) {
		cfg.Services = svc.lookup("greeter")
		cfg.Registerer = prometheus.NewRegistry()
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	for i := range 3 {
		inv := newInvoke("greeter", i)
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		awaitOutput(t, p, inv.InvocationId)
	}
	c.waitApplied()
	for _, r := range c.replicas {
		m := r.p.metrics
		if s, f := promtest.ToFloat64(m.results.WithLabelValues("succeeded")), promtest.ToFloat64(m.results.WithLabelValues("failed")); s != 2 || f != 1 {
			t.Errorf("replica %d counted %v succeeded and %v failed results, want 2 and 1", r.n, s, f)
		}
	}
	m := p.metrics
	count := func(o outbox.Outcome) float64 { return promtest.ToFloat64(m.deliveries.WithLabelValues(o.String())) }
	if s, term, retry := count(outbox.Success), count(outbox.Terminal), count(outbox.Retry); s != 2 || term != 1 || retry != 0 {
		t.Errorf("leader counted deliveries %v success, %v terminal, %v retry; want 2, 1, 0", s, term, retry)
	}
}
