package raftlog

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are created per Node and registered on Config.Registerer (none
// when nil), so two nodes in one process never share a registry.
type metrics struct {
	proposals      prometheus.Counter
	proposalErrors prometheus.Counter
	applied        prometheus.Counter
	fsyncSeconds   prometheus.Histogram
	applySeconds   prometheus.Histogram
	batchEntries   prometheus.Histogram
	batchGroups    prometheus.Histogram
	batchPages     prometheus.Histogram
	leaderChanges  prometheus.Counter
	leaderHandoffs prometheus.Counter
	snapshotsSent  prometheus.Counter
	snapshotsRecv  prometheus.Counter
	droppedMsgs    prometheus.Counter
	writeFailures  prometheus.Counter
	appliedIndex   *prometheus.GaugeVec
}

// newMetrics creates the node's metrics; dbSize reports raft.db's size.
func newMetrics(reg prometheus.Registerer, dbSize func() float64) *metrics {
	m := &metrics{
		proposals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_proposals_total", Help: "Entries accepted by raft on this node as leader.",
		}),
		proposalErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_proposal_failures_total", Help: "Proposals refused (not leader, dropped, stopped).",
		}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_applied_entries_total", Help: "Committed entries applied to state machines.",
		}),
		fsyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_raft_write_commit_seconds", Help: "Duration of one group-commit bbolt transaction commit (write + fsync).",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_raft_apply_seconds", Help: "Duration of one StateMachine.Apply call.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 16),
		}),
		batchEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_raft_write_batch_entries", Help: "Log entries appended per write transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		batchGroups: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_raft_write_batch_requests", Help: "Group write requests carried per write transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		batchPages: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_raft_write_batch_pages", Help: "Pages written (one pwrite each) per write transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_leader_changes_all_groups_total", Help: "Leader or term changes seen by this node's groups.",
		}),
		leaderHandoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_leader_handoffs_total", Help: "Leaderships handed to a group's preferred voter (leader balancing).",
		}),
		snapshotsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_snapshots_sent_total", Help: "Snapshots streamed to followers.",
		}),
		snapshotsRecv: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_snapshots_installed_total", Help: "Snapshots installed on this node.",
		}),
		droppedMsgs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_dropped_messages_total", Help: "Outbound raft messages dropped (queue full or peer down).",
		}),
		appliedIndex: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "raftgate_raft_applied_index", Help: "Applied log index per group.",
		}, []string{"group"}),
		writeFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_write_failures_total", Help: "Write transactions whose commit failed (a disk error such as ENOSPC); after one the node writes nothing more.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.proposals, m.proposalErrors, m.applied, m.fsyncSeconds, m.applySeconds,
			m.batchEntries, m.batchGroups, m.batchPages, m.leaderChanges, m.leaderHandoffs, m.snapshotsSent, m.snapshotsRecv,
			m.droppedMsgs, m.writeFailures, m.appliedIndex,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "raftgate_raft_db_size_bytes", Help: "Size of this node's raft.db file (watch it against the free space of its disk).",
			}, dbSize))
	}
	return m
}

func (m *metrics) appliedGauge(g GroupID) prometheus.Gauge {
	return m.appliedIndex.WithLabelValues(strconv.FormatUint(uint64(g), 10))
}
