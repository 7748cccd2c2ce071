package partition

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftgate/raftgate/outbox"
)

// metrics are one processor's Prometheus collectors, labelled with its
// partition.
type metrics struct {
	commands   *prometheus.CounterVec
	batchSize  prometheus.Histogram
	deliveries *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, partition uint32, p *Processor) (*metrics, error) {
	labels := prometheus.Labels{"partition": strconv.FormatUint(uint64(partition), 10)}
	m := &metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftgate_partition_commands_applied_total", Help: "Commands applied, by kind.", ConstLabels: labels,
		}, []string{"kind"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_partition_proposal_commands", Help: "Commands per proposed log entry.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(1, 4, 6),
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftgate_partition_deliveries_total", Help: "Delivery attempts, by outcome.", ConstLabels: labels,
		}, []string{"outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{
		m.commands, m.batchSize, m.deliveries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "raftgate_partition_outbox_depth", Help: "Deliveries queued in the outbox.", ConstLabels: labels,
		}, func() float64 { return float64(p.OutboxDepth()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "raftgate_partition_pending_requests", Help: "Requests waiting for their entry to apply.", ConstLabels: labels,
		}, func() float64 { return float64(p.tracker.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "raftgate_partition_attach_waiters", Help: "Attach long-polls waiting for a result.", ConstLabels: labels,
		}, func() float64 { return float64(p.attach.Len()) }),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("partition %d: metrics already registered: %w", partition, err)
			}
			return nil, fmt.Errorf("partition %d: register metrics: %w", partition, err)
		}
	}
	return m, nil
}

func (m *metrics) applied(fx *effects) {
	for kind, n := range fx.applied {
		m.commands.WithLabelValues(kind).Add(float64(n))
	}
}

func (m *metrics) proposed(n int) { m.batchSize.Observe(float64(n)) }

func (m *metrics) delivered(o outbox.Outcome) { m.deliveries.WithLabelValues(o.String()).Inc() }
