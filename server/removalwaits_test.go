package server

import (
	"testing"

	"github.com/raftgate/raftgate/raftlog"
)

// TestRemovalWaits: the regression (TestPlacementLosesTwoNodes, 2 runs in
// 5 under -race): a partition moving from node 3 to node 1, whose new
// replica had been promoted when node 1 died; its leader then removed the
// live voter 3 and left the group on {1 (down), 2, 4}, so one more loss
// stopped it for good. A live voter now waits while another voter is not
// heard from; a voter that is down itself is removed at once (a repair:
// it lowers the quorum the live ones must make).
func TestRemovalWaits(t *testing.T) {
	r := func(node uint64) uint64 { return raftlog.ReplicaID(node, 1) }
	m := raftlog.Membership{Voters: []uint64{r(1), r(2), r(3), r(4)}, Learners: []uint64{r(5)}}
	for _, tc := range []struct {
		name     string
		active   map[uint64]bool
		remove   uint64
		wait     bool
		waitedOn uint64
	}{
		{"every voter heard from", map[uint64]bool{1: true, 2: true, 3: true, 4: true}, r(3), false, 0},
		{"the new voter is down", map[uint64]bool{1: false, 2: true, 3: true, 4: true}, r(3), true, 1},
		{"the voter removed is down", map[uint64]bool{1: true, 2: true, 3: false, 4: false}, r(3), false, 0},
		{"a learner", map[uint64]bool{1: false, 2: true, 3: true, 4: true}, r(5), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, wait := removalWaits(raftlog.Status{Active: tc.active}, m, tc.remove)
			if wait != tc.wait || on != tc.waitedOn {
				t.Fatalf("removalWaits = (%d, %v), want (%d, %v)", on, wait, tc.waitedOn, tc.wait)
			}
		})
	}
}
