package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/internal/backoff"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// placementView serves the admin API's /placement from the cluster record;
// its changes go to the metadata leader through the Membership service.
type placementView struct {
	n   *Server
	svc membershipService
}

func (v placementView) Placement(context.Context) (admin.PlacementView, error) {
	n := v.n
	st := n.cluster.State()
	if st.ID == nil {
		return admin.PlacementView{}, fmt.Errorf("the cluster record is not created yet: %w", rpc.ErrUnavailable)
	}
	out := admin.PlacementView{Replication: int(st.Replication), Paused: st.Paused, Partitions: []admin.PartitionPlacement{}}
	for _, pl := range st.Placements {
		if pl.Partition == 0 {
			continue
		}
		pp := admin.PartitionPlacement{ID: pl.Partition, PreferredLeader: pl.PreferredLeader, Version: pl.Version, Replicas: []admin.ReplicaRole{}}
		if g := n.raft.Group(raftlog.GroupID(pl.Partition)); g != nil {
			pp.Leader = g.Status().Leader
		} else if leader, _, ok := n.members.Leader(pl.Partition); ok {
			pp.Leader = leader
		}
		var from, to []uint64
		for _, id := range pl.ObservedVoters {
			role := "voter"
			if !slices.Contains(pl.Replicas, id) {
				role = "outgoing"
				from = append(from, id)
			}
			pp.Replicas = append(pp.Replicas, admin.ReplicaRole{Node: id, Role: role})
		}
		for _, id := range pl.ObservedLearners {
			pp.Replicas = append(pp.Replicas, admin.ReplicaRole{Node: id, Role: "learner"})
			if !slices.Contains(pl.Replicas, id) {
				from = append(from, id)
			}
		}
		for _, id := range pl.Replicas {
			if !slices.Contains(pl.ObservedVoters, id) {
				to = append(to, id)
				if !slices.Contains(pl.ObservedLearners, id) {
					pp.Replicas = append(pp.Replicas, admin.ReplicaRole{Node: id, Role: "incoming"})
				}
			}
		}
		if len(from) > 0 || len(to) > 0 || pl.ObservedJoint {
			pp.Move = &admin.MoveView{From: from, To: to}
		}
		out.Partitions = append(out.Partitions, pp)
	}
	return out, nil
}

func (v placementView) SetReplication(ctx context.Context, r int) error {
	_, err := throughFailover(ctx, func(ctx context.Context) (*rpc.ObserveReply, error) {
		return v.svc.ChangePolicy(ctx, &rpc.PolicyChange{Replication: uint32(r)})
	})
	return adminError(err)
}

func (v placementView) SetPaused(ctx context.Context, paused bool) error {
	change := &rpc.PolicyChange{Pause: 2}
	if paused {
		change.Pause = 1
	}
	_, err := throughFailover(ctx, func(ctx context.Context) (*rpc.ObserveReply, error) { return v.svc.ChangePolicy(ctx, change) })
	return adminError(err)
}

func (v placementView) Move(ctx context.Context, p uint32, from, to uint64) error {
	_, err := throughFailover(ctx, func(ctx context.Context) (*rpc.ObserveReply, error) {
		return v.svc.MovePartition(ctx, &rpc.PartitionMove{Partition: p, From: from, To: to})
	})
	return adminError(err)
}

// adminError maps a Membership service status to the admin API's errors.
func adminError(err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("%s: %w", st.Message(), rpc.ErrNotFound)
	case codes.InvalidArgument:
		return fmt.Errorf("%s: %w", st.Message(), rpc.ErrInvalid)
	case codes.FailedPrecondition, codes.Aborted:
		return &admin.ConflictError{Reason: st.Message()}
	case codes.Unavailable:
		return fmt.Errorf("%s: %w", st.Message(), rpc.ErrUnavailable)
	}
	return errors.New(st.Message())
}

func (s membershipService) ChangePolicy(ctx context.Context, req *rpc.PolicyChange) (*rpc.ObserveReply, error) {
	if leader, ok := s.leaderElsewhere(); ok {
		return forward(ctx, leader, s.dialOpts, func(c rpc.MembershipClient) (*rpc.ObserveReply, error) { return c.ChangePolicy(ctx, req) })
	}
	// A leader elected a moment ago may not have applied what its
	// predecessor committed: read the record once it has.
	if err := s.n.meta.ReadIndex(ctx); err != nil {
		return nil, membershipStatus(err)
	}
	st := s.n.cluster.State()
	if st.ID == nil {
		return nil, status.Error(codes.Unavailable, "the cluster record is not created yet")
	}
	r, paused := st.Replication, st.Paused
	if req.Replication != 0 {
		r = req.Replication
	}
	switch req.Pause {
	case 1:
		paused = true
	case 2:
		paused = false
	}
	if err := s.n.cluster.SetPolicy(ctx, r, paused); err != nil {
		return nil, membershipStatus(err)
	}
	s.n.log.Info().Uint32("replication", r).Bool("paused", paused).Msg("placement: policy changed")
	return &rpc.ObserveReply{}, nil
}

func (s membershipService) MovePartition(ctx context.Context, req *rpc.PartitionMove) (*rpc.ObserveReply, error) {
	if leader, ok := s.leaderElsewhere(); ok {
		return forward(ctx, leader, s.dialOpts, func(c rpc.MembershipClient) (*rpc.ObserveReply, error) { return c.MovePartition(ctx, req) })
	}
	if err := s.n.meta.ReadIndex(ctx); err != nil {
		return nil, membershipStatus(err)
	}
	st := s.n.cluster.State()
	pl, ok := st.Placement(req.Partition)
	if !ok || req.Partition == 0 {
		return nil, status.Errorf(codes.NotFound, "partition %d: no such partition", req.Partition)
	}
	to, ok := st.Node(req.To)
	switch {
	case slices.Contains(pl.Replicas, req.To) && !slices.Contains(pl.Replicas, req.From):
		// Already placed so: a retry of a move whose answer was lost.
		return &rpc.ObserveReply{}, nil
	case !slices.Contains(pl.Replicas, req.From):
		return nil, status.Errorf(codes.FailedPrecondition, "partition %d has no replica on node %d (its replicas: %v)", req.Partition, req.From, pl.Replicas)
	case slices.Contains(pl.Replicas, req.To):
		return nil, status.Errorf(codes.FailedPrecondition, "partition %d already has a replica on node %d", req.Partition, req.To)
	case !ok || to.State != rpc.NodeState_NODE_STATE_ACTIVE:
		return nil, status.Errorf(codes.FailedPrecondition, "node %d is not an active node", req.To)
	}
	next := &rpc.PartitionPlacement{Partition: pl.Partition, Version: pl.Version, PreferredLeader: pl.PreferredLeader}
	for _, id := range pl.Replicas {
		if id == req.From {
			id = req.To
		}
		next.Replicas = append(next.Replicas, id)
	}
	if next.PreferredLeader == req.From {
		next.PreferredLeader = req.To
	}
	if err := s.n.cluster.SetPlacements(ctx, []*rpc.PartitionPlacement{next}); err != nil {
		return nil, membershipStatus(err)
	}
	s.n.log.Info().Uint32("partition", req.Partition).Uint64("from", req.From).Uint64("to", req.To).Msg("placement: partition moved by an operator")
	return &rpc.ObserveReply{}, nil
}

// metaFailoverWait bounds how long an operator's change waits for the
// metadata group to elect a new leader when the one it knew is gone: an
// election takes a few seconds, and a change that fails in the meantime
// only makes the operator (or a script) retry by hand.
const metaFailoverWait = 10 * time.Second

// throughFailover runs call, an idempotent change sent to the metadata
// leader, again while it fails as unavailable (the leader it knew is dead,
// or no leader yet), until metaFailoverWait or ctx ends.
func throughFailover[R any](ctx context.Context, call func(context.Context) (R, error)) (R, error) {
	ctx, cancel := context.WithTimeout(ctx, metaFailoverWait)
	defer cancel()
	b := backoff.Backoff{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	for {
		r, err := call(ctx)
		if status.Code(err) != codes.Unavailable {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, err
		case <-time.After(b.Next()):
		}
	}
}
