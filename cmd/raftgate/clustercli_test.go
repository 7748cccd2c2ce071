package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/server/servertest"
	"github.com/raftgate/raftgate/test/freeport"
)

// The commands that talk to a cluster, run against real in-process nodes
// started through package server.

// freeAddr returns an address for an in-process node or service (see
// freeport: in the ephemeral range another process could take it before
// the node binds it).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t, freeport.Cmd)
}

// TestStatusShowsEveryLeadersReplicas: `raftgate status` asked of a node
// that does not lead every partition still shows each partition's replica
// progress, read from its leader's admin API.
func TestStatusShowsEveryLeadersReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nodes")
	}
	_, cfgs := servertest.StartCluster(t, 3, freeport.Cmd, nil)
	var asked server.Config
	testutil.WaitFor(t, 10*time.Second, "a node that leads some partitions but not all", func() bool {
		for _, c := range cfgs {
			if led := leadsHere(t, c); led < int(c.Partitions)+1 {
				asked = c
				return true
			}
		}
		return false
	})
	res := runCLI(t, "", "status", "--admin", asked.AdminAddr)
	if res.code != 0 {
		t.Fatalf("status: exit %d, %s", res.code, res.stderr)
	}
	rows := 0
	for _, line := range strings.Split(res.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) < 7 || (f[1] != "metadata" && !strings.Contains(f[1], "-")) {
			continue // not a partition row
		}
		rows++
		if f[len(f)-1] == "-" {
			t.Errorf("partition %s shows no replicas:\n%s", f[0], res.stdout)
		}
	}
	if rows != int(asked.Partitions)+1 {
		t.Fatalf("%d partition rows, want %d:\n%s", rows, asked.Partitions+1, res.stdout)
	}
}

// groups is what the node of c says of each group (GET /cluster).
func groups(t *testing.T, c server.Config) []admin.PartitionStatus {
	resp, err := http.Get("http://" + c.AdminAddr + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var view struct{ Partitions []admin.PartitionStatus }
	if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
		t.Fatal(err)
	}
	return view.Partitions
}

// leadsHere is how many groups the node of c says it leads.
func leadsHere(t *testing.T, c server.Config) int {
	led := 0
	for _, p := range groups(t, c) {
		if p.Leader == c.NodeID {
			led++
		}
	}
	return led
}

// metaLeader is the metadata group's leader the node of c knows (0: none).
func metaLeader(t *testing.T, c server.Config) uint64 {
	for _, p := range groups(t, c) {
		if p.ID == 0 {
			return p.Leader
		}
	}
	return 0
}

// TestServicesCommandsReadTheirWrites: `raftgate services add` through a
// follower of the metadata group, then `services list` through it, lists
// the service.
func TestServicesCommandsReadTheirWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nodes")
	}
	_, cfgs := servertest.StartCluster(t, 3, freeport.Cmd, nil)
	var follower server.Config
	testutil.WaitFor(t, 10*time.Second, "a metadata follower", func() bool {
		for _, c := range cfgs {
			if leader := metaLeader(t, c); leader != 0 && leader != c.NodeID {
				follower = c
				return true
			}
		}
		return false
	})
	admin := "http://" + follower.AdminAddr
	for i := range 5 {
		name := fmt.Sprintf("R%d", i)
		if res := runCLI(t, "", "services", "add", name, "http://127.0.0.1:1", "--admin", admin); res.code != 0 {
			t.Fatalf("services add: %+v", res)
		}
		if res := runCLI(t, "", "services", "list", "--admin", admin); res.code != 0 || !strings.Contains(res.stdout, name) {
			t.Fatalf("raftgate services list on node %d right after services add %s there: %+v", follower.NodeID, name, res)
		}
	}
}
