package partition

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// metrics are one processor's Prometheus collectors, labelled with its
// partition.
type metrics struct {
	commands   *prometheus.CounterVec
	byKind     [numCommandKinds]prometheus.Counter // commands' children, looked up once
	batchSize  prometheus.Histogram
	deliveries *prometheus.CounterVec
	byOutcome  [outbox.Retry + 1]prometheus.Counter // deliveries' children, looked up once
	results    *prometheus.CounterVec
	// results' children, looked up once: every replica counts every result.
	succeeded, failed prometheus.Counter
	accepted          prometheus.Counter
	// ticksSkipped: schedule ticks not run (catch-up window, overlap).
	ticksSkipped prometheus.Counter
	// callbackAttempts' children by outcome (callbacks.go), looked up once.
	callbackAttempts [numCallbackOutcomes]prometheus.Counter
	// waiting: due deliveries the leader's last scan held back by flow
	// control (flow.go).
	waiting prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, partition uint32, p *Processor) (*metrics, error) {
	labels := prometheus.Labels{"partition": strconv.FormatUint(uint64(partition), 10)}
	m := &metrics{
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "raftgate_partition_deliveries_waiting_for_limit", ConstLabels: labels,
			Help: "Due deliveries the leader's last outbox scan held back by a service's, handler's or scope's limit (0 on followers).",
		}),
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
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_partition_invocations_accepted_total", ConstLabels: labels,
			Help: "New invocations recorded by this replica (an Invoke of an existing id is not counted).",
		}),
		ticksSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_schedule_ticks_skipped_total", ConstLabels: labels,
			Help: "Schedule ticks this replica recorded as skipped: older than the catch-up window, or dropped by the overlap policy.",
		}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftgate_partition_results_recorded_total", ConstLabels: labels,
			Help: "Results recorded by this replica, by outcome (failed: the service's failure, exhausted retries or a cancellation).",
		}, []string{"outcome"}),
	}
	callbackAttempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftgate_callback_attempts_total", ConstLabels: labels,
		Help: "Completion callback attempts this replica recorded, by outcome (delivered, retry, failed: given up).",
	}, []string{"outcome"})
	for o, name := range callbackOutcomeNames {
		m.callbackAttempts[o] = callbackAttempts.WithLabelValues(name)
	}
	for kind, name := range commandKindNames {
		m.byKind[kind] = m.commands.WithLabelValues(name)
	}
	for o := range m.byOutcome {
		m.byOutcome[o] = m.deliveries.WithLabelValues(outbox.Outcome(o).String())
	}
	// Shown as 0 before the first one.
	m.succeeded, m.failed = m.results.WithLabelValues("succeeded"), m.results.WithLabelValues("failed")
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{
		m.commands, m.batchSize, m.deliveries, m.results, m.accepted, m.ticksSkipped, callbackAttempts, m.waiting,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "raftgate_partition_outbox_depth", Help: "Deliveries queued in the outbox.", ConstLabels: labels,
		}, func() float64 { return float64(p.OutboxDepth()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "raftgate_partition_outbox_oldest_age_seconds",
			Help: "How long the most overdue delivery in the outbox has been due (0: none is due). Every replica holds the same outbox.", ConstLabels: labels,
		}, p.outboxOldestAge),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "raftgate_partition_pending_requests", Help: "Requests waiting for their entry to apply.", ConstLabels: labels,
		}, func() float64 { return float64(p.tracker.Len()) }),
		pausedCollector{p: p, desc: prometheus.NewDesc("raftgate_partition_invocations_paused",
			"Invocations paused (retries exhausted with onMaxAttempts pause, or an operator's pause), waiting for an operator, by service. Every replica holds the same.",
			[]string{"service"}, labels)},
		newBacklogCollector(p, labels),
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
		if n > 0 {
			m.byKind[kind].Add(float64(n))
		}
	}
	m.accepted.Add(float64(fx.accepted))
	m.ticksSkipped.Add(float64(fx.ticksSkipped))
	for o, n := range fx.callbackOutcomes {
		if n > 0 {
			m.callbackAttempts[o].Add(float64(n))
		}
	}
	failed := 0
	for _, r := range fx.completed {
		if r.GetResult().GetFailed() {
			failed++
		}
	}
	if succeeded := len(fx.completed) - failed; succeeded > 0 {
		m.succeeded.Add(float64(succeeded))
	}
	if failed > 0 {
		m.failed.Add(float64(failed))
	}
}

func (m *metrics) waitingForLimit(n int) { m.waiting.Set(float64(n)) }

func (m *metrics) proposed(n int) { m.batchSize.Observe(float64(n)) }

func (m *metrics) delivered(o outbox.Outcome) { m.byOutcome[o].Inc() }

// outboxOldestAge is the age, in seconds, of the most overdue outbox
// entry: now minus the earliest due time, 0 when nothing is due or the
// processor has not started. Read at scrape time (one read transaction).
func (p *Processor) outboxOldestAge() float64 {
	select {
	case <-p.started:
	default:
		return 0
	}
	var due int64
	err := p.log.View(context.Background(), func(b *bolt.Bucket) error {
		return outbox.Scan(b, func(e outbox.Entry) bool {
			due = e.Due
			return false // the queue is ordered by due time: the first is the oldest
		})
	})
	if err != nil || due == 0 {
		return 0
	}
	return max(0, float64(p.now().UnixMilli()-due)/1000)
}

// pausedCollector reports the paused invocations per service, read at
// scrape time from the paused index (one read transaction; paused sets are
// small: each waits for an operator).
type pausedCollector struct {
	p    *Processor
	desc *prometheus.Desc
}

func (c pausedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c pausedCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.p.started:
	default:
		return
	}
	var counts map[string]int
	// Long reads (every paused record, the outbox): beside the applier.
	if err := c.p.log.ViewCheckpoint(context.Background(), func(b *bolt.Bucket) error {
		counts = countPaused(b)
		return nil
	}); err != nil {
		return
	}
	for service, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), service)
	}
}

// backlogCollector reports each service's backlog in the partition
// (backlog.go), read at scrape time on the leader alone (followers do not
// know what is reserved): one bounded outbox walk for every service.
type backlogCollector struct {
	p                                                 *Processor
	inFlight, forLimit, forRetry, paused, oldestWaits *prometheus.Desc
}

func newBacklogCollector(p *Processor, labels prometheus.Labels) backlogCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help+" (backlog.go; the partition's leader alone reports it).", []string{"service"}, labels)
	}
	return backlogCollector{p: p,
		inFlight: desc("raftgate_service_in_flight", "Deliveries of the service under way"),
		forLimit: desc("raftgate_service_waiting_for_limit", "Due deliveries of the service not started, held by a limit"),
		forRetry: desc("raftgate_service_waiting_for_retry", "Deliveries of the service waiting for their next attempt"),
		paused:   desc("raftgate_service_paused", "Paused invocations of the service"),
		oldestWaits: desc("raftgate_service_oldest_waiting_seconds",
			"How long the service's longest-waiting due delivery has been due (0: none waits)"),
	}
}

func (c backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.forLimit, c.forRetry, c.paused, c.oldestWaits} {
		ch <- d
	}
}

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	if leading, _, _ := c.p.tracker.Leadership(); !leading || !c.p.isStarted() {
		return
	}
	now := c.p.now().UnixMilli()
	var all map[string]*rpc.ServiceBacklog
	if err := c.p.log.ViewCheckpoint(context.Background(), func(b *bolt.Bucket) error {
		var err error
		if all, _, err = countBacklogs(b, "", now, c.p.invoker.reserved, BacklogScanLimit); err != nil {
			return err
		}
		for service, n := range countPaused(b) {
			if all[service] == nil {
				all[service] = &rpc.ServiceBacklog{}
			}
			all[service].Paused = uint64(n)
		}
		return nil
	}); err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, service string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, service)
	}
	for service, bl := range all {
		gauge(c.inFlight, float64(bl.InFlight), service)
		gauge(c.forLimit, float64(bl.WaitingForLimit), service)
		gauge(c.forRetry, float64(bl.WaitingForRetry), service)
		gauge(c.paused, float64(bl.Paused), service)
		age := 0.0
		if bl.WaitingForLimit > 0 {
			age = max(0, float64(now-bl.OldestWaitingDueUnixMs)/1000)
		}
		gauge(c.oldestWaits, age, service)
	}
}
