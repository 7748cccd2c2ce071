package raftlog

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are created per Node and registered on Config.Registerer (none
// when nil), so two nodes in one process never share a registry.
type metrics struct {
	proposals          prometheus.Counter
	proposalErrors     prometheus.Counter
	applied            prometheus.Counter
	walSyncSeconds     prometheus.Histogram
	walBatchEntries    prometheus.Histogram
	walBatchRequests   prometheus.Histogram
	applySeconds       prometheus.Histogram
	checkpointSeconds  prometheus.Histogram
	checkpointEntries  prometheus.Histogram
	leaderChanges      prometheus.Counter
	leaderHandoffs     prometheus.Counter
	snapshotsSent      prometheus.Counter
	snapshotsReceived  prometheus.Counter
	snapshotsInstalled prometheus.Counter
	droppedMsgs        prometheus.Counter
	writeFailures      prometheus.Counter
	appliedIndex       *prometheus.GaugeVec
}

// newMetrics creates the node's metrics; dbSize reports state.db's size,
// walSize the write-ahead log's.
func newMetrics(reg prometheus.Registerer, dbSize, walSize func() float64) *metrics {
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
		walSyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_wal_fsync_seconds", Help: "Duration of one write-ahead log batch write with its fdatasync.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		walBatchEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_wal_batch_entries", Help: "Log entries appended per write-ahead log write.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		walBatchRequests: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_wal_batch_requests", Help: "Group appends carried per write-ahead log write.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_raft_apply_seconds", Help: "Duration of one StateMachine.Apply call.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 16),
		}),
		checkpointSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_checkpoint_seconds", Help: "Duration of one state checkpoint (bbolt commit with its fsyncs).",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
		}),
		checkpointEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftgate_checkpoint_entries", Help: "Entries applied since the previous checkpoint, per checkpoint.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_leader_changes_all_groups_total", Help: "Leader or term changes seen by this node's groups (all groups together).",
		}),
		leaderHandoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_leader_handoffs_total", Help: "Leaderships handed to a group's preferred voter (leader balancing).",
		}),
		snapshotsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_snapshots_sent_total", Help: "Snapshots streamed to followers.",
		}),
		snapshotsReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_snapshots_received_total", Help: "Snapshots received in full and handed to raft (which may still refuse a stale one).",
		}),
		snapshotsInstalled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_snapshots_installed_total", Help: "Snapshots installed and checkpointed on this node.",
		}),
		droppedMsgs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_raft_dropped_messages_total", Help: "Outbound raft messages dropped (queue full or peer down).",
		}),
		appliedIndex: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "raftgate_raft_applied_index", Help: "Applied log index per group.",
		}, []string{"group"}),
		writeFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftgate_storage_write_failures_total", Help: "Log writes or state checkpoints that failed (a disk error such as ENOSPC); after one the node writes nothing more.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.proposals, m.proposalErrors, m.applied, m.walSyncSeconds, m.walBatchEntries, m.walBatchRequests,
			m.applySeconds, m.checkpointSeconds, m.checkpointEntries, m.leaderChanges, m.leaderHandoffs,
			m.snapshotsSent, m.snapshotsReceived, m.snapshotsInstalled, m.droppedMsgs, m.writeFailures, m.appliedIndex,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "raftgate_state_db_size_bytes", Help: "Size of this node's state.db file (watch it against the free space of its disk).",
			}, dbSize),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "raftgate_wal_size_bytes", Help: "Bytes of this node's write-ahead log segments on disk.",
			}, walSize))
	}
	return m
}

func (m *metrics) appliedGauge(g GroupID) prometheus.Gauge {
	return m.appliedIndex.WithLabelValues(strconv.FormatUint(uint64(g), 10))
}
