package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/internal/buildinfo"
	"github.com/raftgate/raftgate/rpc"
)

// nodesView serves the admin API's node table from the cluster record,
// gossip's liveness and each node's own answer (its version).
type nodesView struct {
	n   *Server
	svc membershipService
}

// describeTimeout bounds the question of one node's version.
const describeTimeout = time.Second

func (v nodesView) Nodes(ctx context.Context) ([]admin.NodeView, error) {
	n := v.n
	st := n.cluster.State()
	if st.ID == nil {
		return nil, fmt.Errorf("the cluster record is not created yet: %w", rpc.ErrUnavailable)
	}
	out := make([]admin.NodeView, len(st.Nodes))
	var wg sync.WaitGroup
	for i, m := range st.Nodes {
		nv := admin.NodeView{ID: m.Id, State: cluster.StateName(m.State), NodeAddr: m.NodeAddr,
			Ingress: m.IngressAddr, Admin: m.AdminAddr, Zone: m.Zone, Groups: []admin.GroupRole{}}
		if mem, ok := n.members.Node(m.Id); ok {
			nv.Alive = mem.Alive
		}
		// Roles as each group's leader last recorded them: this node may
		// hold no replica of a group to look at.
		for _, pl := range st.Placements {
			switch {
			case slices.Contains(pl.ObservedVoters, m.Id):
				nv.Groups = append(nv.Groups, admin.GroupRole{Group: pl.Partition, Role: "voter"})
			case slices.Contains(pl.ObservedLearners, m.Id):
				nv.Groups = append(nv.Groups, admin.GroupRole{Group: pl.Partition, Role: "learner"})
			}
		}
		out[i] = nv
		switch {
		case m.Id == n.cfg.NodeID:
			out[i].Version, out[i].Alive = buildinfo.Read().Version, true
		case nv.Alive:
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(ctx, describeTimeout)
				defer cancel()
				if d, err := describe(ctx, m.NodeAddr, v.svc.dialOpts); err == nil {
					out[i].Version = d.Version
				}
			})
		}
	}
	wg.Wait()
	return out, nil
}

func (v nodesView) RemoveNode(ctx context.Context, id uint64, force bool) (admin.NodeView, error) {
	node, err := throughFailover(ctx, func(ctx context.Context) (*rpc.ClusterNode, error) {
		return v.svc.Remove(ctx, &rpc.RemoveRequest{Id: id, Force: force})
	})
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.NotFound:
			return admin.NodeView{}, fmt.Errorf("%s: %w", st.Message(), rpc.ErrNotFound)
		case codes.FailedPrecondition:
			return admin.NodeView{}, &admin.RefusedError{Reason: st.Message()}
		case codes.Unavailable:
			return admin.NodeView{}, fmt.Errorf("%s: %w", st.Message(), rpc.ErrUnavailable)
		}
		return admin.NodeView{}, errors.New(st.Message())
	}
	return admin.NodeView{ID: node.Id, State: cluster.StateName(node.State), NodeAddr: node.NodeAddr,
		Ingress: node.IngressAddr, Admin: node.AdminAddr, Zone: node.Zone, Groups: []admin.GroupRole{}}, nil
}
