package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// placementView is GET /placement.
type placementView struct {
	Replication int `json:"replication"`
	Partitions  []struct {
		ID       uint32 `json:"id"`
		Replicas []struct {
			Node uint64 `json:"node"`
			Role string `json:"role"`
		} `json:"replicas"`
		PreferredLeader uint64 `json:"preferredLeader"`
		Leader          uint64 `json:"leader"`
		Move            *struct {
			From []uint64 `json:"from"`
			To   []uint64 `json:"to"`
		} `json:"move"`
	} `json:"partitions"`
}

func readPlacement(n *node) (placementView, error) {
	var v placementView
	r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/placement", nil, nil)
	if err != nil {
		return v, err
	}
	if r.status != http.StatusOK {
		return v, fmt.Errorf("GET /placement: %d %s", r.status, r.body)
	}
	return v, json.Unmarshal(r.body, &v)
}

// TestPlacementZonesUnderLoad: three nodes in three zones grow to six
// under client load (three joiners, one per zone), with R = 3: every
// partition ends on three voters, one per zone, with replicas and
// preferred leaders per node within one of even. Then a whole zone (two
// nodes) is killed with kill -9: the service goes on, nothing
// acknowledged is lost, histories stay linearizable.
func TestPlacementZonesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const partitions = 6
	zones := []string{"za", "zb", "zc"}
	c := startCluster(t, clusterOpts{nodes: 3, partitions: partitions,
		extraArgs: func(id int) []string { return []string{"--zone", zones[id-1]} }})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)
	seed := robustnessSeed(t)
	zoneOf := map[uint64]string{1: "za", 2: "zb", 3: "zc"}

	rt := startRoundTraffic(t, c, seed, 60*time.Second)
	rt.progress(30)
	var joined []*node
	for _, z := range zones {
		n := c.joinNode(0, "--zone", z)
		zoneOf[uint64(n.id)] = z
		joined = append(joined, n)
	}
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last placement: %s", last)
		}
	})
	testutil.WaitFor(t, 120*time.Second, "six nodes, R = 3, one replica per zone, balanced", func() bool {
		v, err := readPlacement(c.nodes[0])
		if err != nil {
			last = err.Error()
			return false
		}
		b, _ := json.Marshal(v)
		last = string(b)
		perNode, leads := map[uint64]int{}, map[uint64]int{}
		for id := range zoneOf {
			perNode[id], leads[id] = 0, 0
		}
		for _, p := range v.Partitions {
			if p.Move != nil || len(p.Replicas) != 3 {
				return false
			}
			seen := map[string]bool{}
			for _, r := range p.Replicas {
				if r.Role != "voter" || seen[zoneOf[r.Node]] {
					return false
				}
				seen[zoneOf[r.Node]] = true
				perNode[r.Node]++
			}
			leads[p.PreferredLeader]++
		}
		return spreadOK(perNode) && spreadOK(leads)
	})
	t.Logf("placement settled: %s", last)
	// Leader balancing follows placement: each partition ends up led by
	// its preferred leader, so leaders per node are within one of even too.
	testutil.WaitFor(t, 90*time.Second, "every partition led by its preferred leader", func() bool {
		v, err := readPlacement(c.nodes[0])
		if err != nil {
			return false
		}
		b, _ := json.Marshal(v)
		last = string(b)
		for _, p := range v.Partitions {
			if p.Leader == 0 || p.Leader != p.PreferredLeader {
				return false
			}
		}
		return true
	})
	rt.progress(30)
	rt.end()
	c.nodes = append(c.nodes, joined...)
	out := row{failpoint: "grow 3 → 6 in three zones", v: validate(c, rt.rec, svc, "Echo")}
	report(t, out.failpoint, out)

	// Lose zone za: node 1 and the joiner placed there.
	rt = startRoundTraffic(t, c, seed+1, 60*time.Second)
	rt.progress(30)
	var lost []*node
	for _, n := range c.nodes {
		if zoneOf[uint64(n.id)] == "za" {
			c.kill(n)
			lost = append(lost, n)
		}
	}
	rt.progress(60) // every partition keeps two of its three replicas
	rt.end()
	c.nodes = slices.DeleteFunc(c.nodes, func(n *node) bool { return slices.Contains(lost, n) })
	if applied, err := c.waitConverged(30 * time.Second); err != nil {
		t.Errorf("after losing a zone: %v", err)
	} else {
		t.Logf("after losing a zone: replicas converged at %v", applied)
	}
	out = row{failpoint: "lose a zone", v: validate(c, rt.rec, svc, "Echo")}
	report(t, out.failpoint, out)
	if out.v.linearizable != "Ok" {
		t.Errorf("lose a zone: linearizable: %s", out.v.linearizable)
	}
}

// spreadOK reports whether the counts are within one of each other.
func spreadOK(count map[uint64]int) bool {
	lo, hi := -1, 0
	for _, n := range count {
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	return hi-lo <= 1
}

// TestPlacementLosesTwoNodes: five nodes bootstrapped with R = 3 (every
// partition starts on all five, then the planner takes two off each) lose
// two nodes one after the other, under client load; after each loss the
// lost node's replicas are placed on the others once it was gone for
// --dead-node-timeout, so the second loss costs no partition its quorum.
// Nothing acknowledged is lost.
func TestPlacementLosesTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const partitions = 5
	c := startCluster(t, clusterOpts{nodes: 5, partitions: partitions,
		extraArgs: func(int) []string { return []string{"--dead-node-timeout", "2s"} }})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)
	seed := robustnessSeed(t)
	// settled waits until every partition has three voters, none on a
	// node of gone, and no move is in flight.
	settled := func(what string, gone ...int) {
		t.Helper()
		var last string
		testutil.WaitFor(t, 90*time.Second, what, func() bool {
			v, err := readPlacement(c.nodes[len(c.nodes)-1])
			if err != nil {
				last = err.Error()
				return false
			}
			b, _ := json.Marshal(v)
			last = string(b)
			for _, p := range v.Partitions {
				if p.Move != nil || len(p.Replicas) != 3 {
					return false
				}
				for _, r := range p.Replicas {
					if r.Role != "voter" || slices.Contains(gone, int(r.Node)) {
						return false
					}
				}
			}
			return true
		})
		t.Logf("%s: %s", what, last)
	}
	settled("five nodes, three replicas each")
	rt := startRoundTraffic(t, c, seed, 60*time.Second)
	rt.progress(30)
	var gone []int
	for _, victim := range []*node{c.nodes[0], c.nodes[1]} {
		c.kill(victim)
		gone = append(gone, victim.id)
		settled(fmt.Sprintf("node %d's replicas placed elsewhere", victim.id), gone...)
		rt.progress(30)
	}
	rt.end()
	c.nodes = slices.DeleteFunc(c.nodes, func(n *node) bool { return slices.Contains(gone, n.id) })
	if applied, err := c.waitConverged(30 * time.Second); err != nil {
		t.Errorf("%v", err)
	} else {
		t.Logf("replicas converged at %v", applied)
	}
	out := row{failpoint: "lose two of five nodes", v: validate(c, rt.rec, svc, "Echo")}
	report(t, out.failpoint, out)
	if out.v.linearizable != "Ok" {
		t.Errorf("linearizable: %s", out.v.linearizable)
	}
}
