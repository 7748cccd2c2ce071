package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/raftgate/raftgate/raftlog"
)

// A leader change is counted once per group, however often the same
// leader and term are announced.
func TestGroupLeaderChanges(t *testing.T) {
	m := newGroupMetrics(&Server{})
	for _, ev := range []raftlog.LeaderEvent{
		{Group: 1, Leader: 2, Term: 3},
		{Group: 1, Leader: 2, Term: 3}, // repeated: not a change
		{Group: 1, Leader: 0, Term: 4}, // election under way
		{Group: 1, Leader: 1, Term: 4},
		{Group: 0, Leader: 1, Term: 1},
	} {
		m.onLeadership(ev)
	}
	if got := testutil.ToFloat64(m.changes.WithLabelValues("1")); got != 3 {
		t.Fatalf("group 1: %v changes, want 3", got)
	}
	if got := testutil.ToFloat64(m.changes.WithLabelValues("0")); got != 1 {
		t.Fatalf("group 0: %v changes, want 1", got)
	}
}
