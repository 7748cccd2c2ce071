package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// peerTimeout bounds one call to another node's admin API.
const peerTimeout = 2 * time.Second

// fillFromLeaders completes, for GET /cluster?leaders=1, the partitions
// this node does not lead: only a leader knows its replicas' progress and
// its outbox depth, so each leader's admin API (its address from the node
// list) is asked once, with the caller's own Authorization header. A
// partition whose leader cannot be asked, or has since moved, keeps no
// replicas and no outbox depth (shown as unknown), never a guess.
func (s *server) fillFromLeaders(ctx context.Context, r *http.Request, v *ClusterView) {
	adminOf := map[uint64]string{}
	for _, n := range v.Nodes {
		if n.Alive && n.AdminAddr != "" {
			adminOf[n.ID] = n.AdminAddr
		}
	}
	wanted := map[uint64]bool{}
	for _, p := range v.Partitions {
		if p.Leader != 0 && len(p.Replicas) == 0 && adminOf[p.Leader] != "" {
			wanted[p.Leader] = true
		}
	}
	var mu sync.Mutex
	views := map[uint64]map[uint32]PartitionStatus{}
	var wg sync.WaitGroup
	for id := range wanted {
		wg.Go(func() {
			lv, err := s.peerCluster(ctx, adminOf[id], r.Header.Get("Authorization"))
			if err != nil {
				s.log.Debug().Err(err).Uint64("node", id).Msg("leader's cluster view unavailable")
				return
			}
			byID := map[uint32]PartitionStatus{}
			for _, lp := range lv.Partitions {
				byID[lp.ID] = lp
			}
			mu.Lock()
			views[id] = byID
			mu.Unlock()
		})
	}
	wg.Wait()
	v.Partitions = slices.Clone(v.Partitions) // the Cluster's slice is not ours to change
	for i := range v.Partitions {
		p := &v.Partitions[i]
		if lp, ok := views[p.Leader][p.ID]; ok && lp.Leader == p.Leader && lp.Term == p.Term {
			p.Replicas, p.OutboxDepth = lp.Replicas, lp.OutboxDepth
		}
	}
}

func (s *server) peerCluster(ctx context.Context, addr, authorization string) (*ClusterView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/cluster", nil)
	if err != nil {
		return nil, err
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := s.peers.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /cluster at %s: %s", addr, resp.Status)
	}
	var v ClusterView
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&v); err != nil {
		return nil, fmt.Errorf("GET /cluster at %s: %w", addr, err)
	}
	return &v, nil
}
