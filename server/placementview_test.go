package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestPlacementChangeWaitsOutMetadataFailover: an operator's change sent
// just after the metadata leader died waits for the next leader and is
// made, instead of failing with 503 because the node it reached still
// names the dead leader (TestMoveAwayFromDownReplica failed so in CI).
func TestPlacementChangeWaitsOutMetadataFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startTestCluster(t, 3)
	var leader *Server
	testutil.WaitFor(t, 20*time.Second, "a metadata leader every node knows, and the cluster record", func() bool {
		leader = nil
		for _, nd := range nodes {
			if nd.meta.Status().IsLeader {
				leader = nd
			}
		}
		if leader == nil {
			return false
		}
		for _, nd := range nodes {
			if nd.meta.Status().Leader != leader.cfg.NodeID || nd.cluster.State().ID == nil {
				return false
			}
		}
		return true
	})
	var survivor *Server
	for _, nd := range nodes {
		if nd != leader {
			survivor = nd
		}
	}
	closeStart := time.Now()
	if err := leader.closeAll(); err != nil { // as a crash: no hand-off
		t.Fatal(err)
	}
	if st := survivor.meta.Status(); st.Leader != leader.cfg.NodeID {
		// The crash took longer than an election (a loaded machine): the
		// change below then meets the new leader, and checks less.
		t.Logf("node %d already names metadata leader %d, %v after the crash began: the failover is over", survivor.cfg.NodeID, st.Leader, time.Since(closeStart))
	}
	adminURL := "http://" + survivor.cfg.AdminAddr
	if r := call(t, http.MethodPost, adminURL+"/placement/pause", ""); r.status != http.StatusNoContent {
		t.Fatalf("pause while the metadata leader is down: %d %s", r.status, r.body)
	}
	if r := call(t, http.MethodGet, adminURL+"/placement", ""); r.status != http.StatusOK || !strings.Contains(r.body, `"paused": true`) {
		t.Fatalf("placement after pause: %d %s", r.status, r.body)
	}
}
