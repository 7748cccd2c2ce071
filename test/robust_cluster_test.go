package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"syscall"
	"time"

	"github.com/raftgate/raftgate/invocation"
)

// clusterView is the part of GET /cluster the robustness suite reads.
type clusterView struct {
	Ready      bool        `json:"ready"`
	Partitions []groupView `json:"partitions"`
}

// groupView is one of the groups (0 = metadata) a node holds a replica of.
type groupView struct {
	ID           uint32 `json:"id"`
	Leader       uint64 `json:"leader"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"appliedIndex"`
	StateDigest  string `json:"stateDigest"`
	DigestIndex  uint64 `json:"digestIndex"`
}

// view returns node n's GET /cluster, or an error if it does not answer
// within a second (it may be down or frozen).
func (c *cluster) view(n *node) (clusterView, error) {
	var v clusterView
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := do(ctx, http.MethodGet, n.adminURL()+"/cluster?digest=1", nil, nil)
	if err != nil {
		return v, err
	}
	if r.status != http.StatusOK {
		return v, fmt.Errorf("GET /cluster: %d %s", r.status, r.body)
	}
	return v, json.Unmarshal(r.body, &v)
}

// alive reports whether node n's process is running (possibly stopped).
func (n *node) alive() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// leaders returns, per group id (0 = metadata), the leader with the
// highest term that any live node reports.
func (c *cluster) leaders() map[uint32]uint64 {
	best := map[uint32][2]uint64{} // group -> {term, leader}
	for _, n := range c.nodes {
		if !n.alive() {
			continue
		}
		v, err := c.view(n)
		if err != nil {
			continue
		}
		for _, p := range v.Partitions {
			if p.Leader != 0 && p.Term >= best[p.ID][0] {
				best[p.ID] = [2]uint64{p.Term, p.Leader}
			}
		}
	}
	out := map[uint32]uint64{}
	for g, tl := range best {
		out[g] = tl[1]
	}
	return out
}

// leaderOfMost is the node leading the most partitions (ties: lowest id).
func (c *cluster) leaderOfMost() *node {
	count := map[uint64]int{}
	for g, l := range c.leaders() {
		if g != 0 {
			count[l]++
		}
	}
	best, bestN := uint64(0), -1
	for id, k := range count {
		if k > bestN || (k == bestN && id < best) {
			best, bestN = id, k
		}
	}
	if best == 0 {
		return c.nodes[0]
	}
	return c.nodes[best-1]
}

// waitConverged waits until every node answers /cluster with the same
// applied index and the same state digest for every group (traffic must
// have stopped). It returns the per-group applied indexes. Replicas at one
// index with different digests have diverged: that never converges, and
// the error says so.
func (c *cluster) waitConverged(timeout time.Duration) (map[uint32]uint64, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		applied, desc, ok := c.appliedIndexes()
		if ok {
			return applied, nil
		}
		last = desc
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("replicas did not converge within %v: %s", timeout, last)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

func (c *cluster) appliedIndexes() (map[uint32]uint64, string, bool) {
	applied := map[uint32]uint64{}
	digests := map[uint32]string{}
	desc := ""
	ok := true
	for _, n := range c.nodes {
		v, err := c.view(n)
		if err != nil {
			return nil, fmt.Sprintf("node %d: %v", n.id, err), false
		}
		sort.Slice(v.Partitions, func(i, j int) bool { return v.Partitions[i].ID < v.Partitions[j].ID })
		desc += fmt.Sprintf(" node%d:", n.id)
		for _, p := range v.Partitions {
			desc += fmt.Sprintf(" %d@%d", p.ID, p.AppliedIndex)
			if prev, seen := applied[p.ID]; seen && prev != p.AppliedIndex {
				ok = false
			}
			if p.DigestIndex != p.AppliedIndex || p.StateDigest == "" {
				ok = false // the digest was read at another index
			} else if prev, seen := digests[p.ID]; seen && prev != p.StateDigest && applied[p.ID] == p.AppliedIndex {
				ok = false
				desc += fmt.Sprintf(" DIVERGED(group %d: %.12s vs %.12s at index %d)", p.ID, prev, p.StateDigest, p.AppliedIndex)
			}
			digests[p.ID] = p.StateDigest
			applied[p.ID] = p.AppliedIndex
		}
	}
	return applied, desc, ok
}

// probeKeys returns, for each partition 1..n, an idempotency key of
// Service/handler whose invocation lands on that partition.
func probeKeys(service, handler, prefix string, n uint32) map[uint32]string {
	keys := map[uint32]string{}
	for i := 0; uint32(len(keys)) < n; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		p := invocation.PartitionFor(invocation.Idempotent(service, handler, k).PartitionKey(), n)
		if _, ok := keys[p]; !ok {
			keys[p] = k
		}
	}
	return keys
}

// ensureAllUp undoes whatever a failed earlier run left behind: reopens
// every proxied link, wakes stopped nodes and restarts dead ones.
func (c *cluster) ensureAllUp() {
	c.t.Helper()
	if c.net != nil {
		c.net.heal()
	}
	for _, n := range c.nodes {
		if n.alive() {
			c.signal(n, syscall.SIGCONT)
			continue
		}
		c.restart(n)
	}
	for _, n := range c.nodes {
		c.waitReady(n, 30*time.Second)
	}
}
