package raftlog

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

func TestCheckpointDue(t *testing.T) {
	p := checkpointPolicy{interval: 100 * time.Millisecond, entries: 1000}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		now     time.Duration
		open    bool
		entries int
		force   bool
		due     bool
		wakeAt  time.Duration // -1: none
	}{
		{"nothing open", time.Hour, false, 0, false, false, -1},
		{"forced", 0, false, 0, true, true, -1},
		{"open, interval not over", 30 * time.Millisecond, true, 10, false, false, 100 * time.Millisecond},
		{"open, interval over", 100 * time.Millisecond, true, 10, false, true, -1},
		{"open with views only, interval over", 150 * time.Millisecond, true, 0, false, true, -1},
		{"entry count reached", time.Millisecond, true, 1000, false, true, -1},
	} {
		due, wakeAt := p.checkpointDue(t0.Add(tc.now), t0, tc.open, tc.entries, tc.force)
		want := time.Time{}
		if tc.wakeAt >= 0 {
			want = t0.Add(tc.wakeAt)
		}
		if due != tc.due || !wakeAt.Equal(want) {
			t.Errorf("%s: checkpointDue = %v, %v; want %v, %v", tc.name, due, wakeAt, tc.due, want)
		}
	}
}

func TestCompactionPoint(t *testing.T) {
	cfg := Config{SnapshotEntries: 100, SnapshotCatchUpEntries: 20, IdleCompactAfter: time.Minute}
	for _, tc := range []struct {
		name                         string
		applied, checkpoint, compact uint64
		since                        time.Duration
		index                        uint64
		due                          bool
	}{
		{"too few entries", 150, 150, 100, time.Second, 0, false},
		{"enough entries: catch-up kept", 250, 250, 100, time.Second, 230, true},
		{"never past the checkpoint", 250, 180, 100, time.Second, 180, true},
		{"checkpoint behind the point: nothing", 250, 90, 100, time.Second, 0, false},
		{"an idle group compacts to its checkpoint after IdleCompactAfter", 150, 140, 100, time.Minute + time.Second, 140, true},
		{"idle but nothing checkpointed past the point", 150, 100, 100, time.Minute + time.Second, 0, false},
	} {
		index, due := compactionPoint(cfg, tc.applied, tc.checkpoint, tc.compact, tc.since)
		if due != tc.due || (due && index != tc.index) {
			t.Errorf("%s: compactionPoint = %d, %v; want %d, %v", tc.name, index, due, tc.index, tc.due)
		}
	}
}

// TestCompactionReleasesLogSegments: with small segments, compaction past
// many of them (after checkpoints) lets the log delete or recycle them, so
// the log on disk stays bounded; a restart afterwards still finds the whole
// state and the log past the checkpoint.
func TestCompactionReleasesLogSegments(t *testing.T) {
	c := newCluster(t, testSeed(t), 1, []GroupID{MetaGroup, 1}, func(cfg *Config) {
		cfg.WALSegmentBytes = 64 << 10
		cfg.SnapshotEntries = 50
		cfg.SnapshotCatchUpEntries = 10
		cfg.CheckpointInterval = 5 * time.Millisecond
		cfg.IdleCompactAfter = 100 * time.Millisecond // the idle metadata group too
	})
	c.leader(1, c.ids, 2*time.Second)
	payload := strings.Repeat("x", 2000)
	var want []string
	for i := range 400 { // about 800 KB: a dozen segments
		want = append(want, fmt.Sprintf("%04d%s", i, payload))
		if err := c.propose(1, 1, want[i]); err != nil {
			t.Fatal(err)
		}
	}
	w := c.nodes[1].wal
	testutil.WaitFor(t, 10*time.Second, "old segments deleted or recycled", func() bool {
		st := w.Stats()
		return st.CutOvers >= 8 && st.Removed+st.Recycled >= 4 && st.Segments <= 4
	})
	if first := w.FirstIndex(1); first < 300 {
		t.Errorf("group 1's log still starts at %d after compaction", first)
	}
	c.stop(1)
	c.start(1)
	c.leader(1, c.ids, 2*time.Second)
	if got := entriesOf(t, c.nodes[1].Group(1)); !slices.Equal(got, want) {
		t.Fatalf("after a restart group 1 holds %d entries, want %d", len(got), len(want))
	}
}
