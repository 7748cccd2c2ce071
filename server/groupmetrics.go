package server

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftgate/raftgate/raftlog"
)

// groupMetrics exports the state of each Raft group on this node, labelled
// group="0" for the metadata group and "1".."P" for the partitions: whether
// a leader is known and whether this node is it, leader changes, the
// entries committed but not yet applied here, and on the leader each
// replica's lag. Gauges are read from raftlog at scrape time.
type groupMetrics struct {
	n *Server

	hasLeader, isLeader, applyLag, replicaLag *prometheus.Desc
	changes                                   *prometheus.CounterVec

	mu sync.Mutex
	// last is the leader and term each group last announced. Guarded by mu.
	last map[raftlog.GroupID][2]uint64
}

func newGroupMetrics(n *Server) *groupMetrics {
	group := []string{"group"}
	return &groupMetrics{
		n: n,
		hasLeader: prometheus.NewDesc("raftgate_raft_has_leader",
			"1 when this node knows a leader of the group.", group, nil),
		isLeader: prometheus.NewDesc("raftgate_raft_is_leader",
			"1 when this node leads the group.", group, nil),
		applyLag: prometheus.NewDesc("raftgate_raft_apply_lag_entries",
			"Entries committed but not yet applied on this node.", group, nil),
		replicaLag: prometheus.NewDesc("raftgate_raft_replica_lag_entries",
			"On the group's leader: entries committed that the replica has not acknowledged.", []string{"group", "replica"}, nil),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftgate_raft_leader_changes_total",
			Help: "Changes of leader or term of the group seen by this node.",
		}, group),
		last: map[raftlog.GroupID][2]uint64{},
	}
}

// onLeadership counts a leader change; it runs on raftlog goroutines.
func (m *groupMetrics) onLeadership(ev raftlog.LeaderEvent) {
	m.mu.Lock()
	prev, seen := m.last[ev.Group]
	m.last[ev.Group] = [2]uint64{ev.Leader, ev.Term}
	m.mu.Unlock()
	if !seen || prev != [2]uint64{ev.Leader, ev.Term} {
		m.changes.WithLabelValues(groupLabel(ev.Group)).Inc()
	}
}

func groupLabel(g raftlog.GroupID) string { return strconv.FormatUint(uint64(g), 10) }

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Describe implements prometheus.Collector.
func (m *groupMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.hasLeader
	ch <- m.isLeader
	ch <- m.applyLag
	ch <- m.replicaLag
	m.changes.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *groupMetrics) Collect(ch chan<- prometheus.Metric) {
	m.changes.Collect(ch)
	for id := uint32(0); id <= m.n.cfg.Partitions; id++ {
		g := m.n.raft.Group(raftlog.GroupID(id))
		if g == nil {
			continue
		}
		st := g.Status()
		label := groupLabel(raftlog.GroupID(id))
		ch <- prometheus.MustNewConstMetric(m.hasLeader, prometheus.GaugeValue, boolGauge(st.Leader != 0), label)
		ch <- prometheus.MustNewConstMetric(m.isLeader, prometheus.GaugeValue, boolGauge(st.IsLeader), label)
		ch <- prometheus.MustNewConstMetric(m.applyLag, prometheus.GaugeValue, float64(st.Committed-min(st.Applied, st.Committed)), label)
		if !st.IsLeader {
			continue
		}
		for _, voter := range st.Voters {
			if !st.Active[voter] {
				continue // down: its lag is unknown, and the series is absent
			}
			match := st.Match[voter]
			ch <- prometheus.MustNewConstMetric(m.replicaLag, prometheus.GaugeValue, float64(st.Committed-min(match, st.Committed)),
				label, strconv.FormatUint(voter, 10))
		}
	}
}
