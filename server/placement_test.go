package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
)

// TestPlacementFollowsLocalLeaders: on a three-node cluster with the
// default --placement local, a send without a key through a node that
// leads a partition lands in one it leads (so its append skipped the hop to
// another node), and through a node that leads none, anywhere.
func TestPlacementFollowsLocalLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startTestCluster(t, 3)
	svc := newTestService(t)
	adminURL := "http://" + nodes[0].cfg.AdminAddr
	if r := call(t, http.MethodPut, adminURL+"/services/Echo", `{"url":"`+svc.srv.URL+`"}`); r.status/100 != 2 {
		t.Fatalf("register Echo: %d %s", r.status, r.body)
	}
	parts := nodes[0].cfg.Partitions
	dataLed := func(nd *Server) []uint32 { return nd.led.partitions() }
	testutil.WaitFor(t, 20*time.Second, "every partition led by a node that knows it", func() bool {
		var all []uint32
		for _, nd := range nodes {
			all = append(all, dataLed(nd)...)
		}
		slices.Sort(all)
		return len(all) == int(parts) && all[0] == 1 && all[len(all)-1] == parts
	})

	checked := 0
	for _, nd := range nodes {
		url := "http://" + nd.cfg.IngressAddr + "/Echo/echo/send"
		for i := range 10 {
			before := dataLed(nd)
			r := call(t, http.MethodPost, url, fmt.Sprintf(`"%d"`, i), "content-type", "application/json")
			if r.status != http.StatusAccepted {
				t.Fatalf("node %d send: %d %s", nd.cfg.NodeID, r.status, r.body)
			}
			var b struct {
				InvocationID string `json:"invocationId"`
			}
			if err := json.Unmarshal([]byte(r.body), &b); err != nil {
				t.Fatalf("node %d send body %q: %v", nd.cfg.NodeID, r.body, err)
			}
			id, err := invocation.ParseID(b.InvocationID)
			if err != nil {
				t.Fatal(err)
			}
			p := invocation.PartitionFor(id.PartitionKey(), parts)
			after := dataLed(nd)
			if len(before) == 0 || !slices.Equal(before, after) {
				continue // leads nothing, or the leadership moved meanwhile
			}
			if !slices.Contains(before, p) {
				t.Fatalf("node %d leads %v, but its send %s went to partition %d", nd.cfg.NodeID, before, b.InvocationID, p)
			}
			checked++
		}
	}
	// Two partitions on three nodes: at least one node leads one.
	if checked < 10 {
		t.Fatalf("only %d sends went through a node with a steady leadership; want at least 10", checked)
	}
}
