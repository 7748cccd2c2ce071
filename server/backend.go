package server

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/ingress/dispatch"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/partition"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// backend serves the dispatch stream from this node's state machines.
type backend struct {
	parts *localPartitions
	// count is the cluster's partition count; hints name a partition's
	// leader for a request this node holds no replica for.
	count uint32
	hints leaderHints
	// writes changes the registry, fencing every partition before it
	// answers.
	writes registry.Writer
}

var (
	_ dispatch.Backend          = backend{}
	_ dispatch.CallBackend      = backend{}
	_ dispatch.KeyBackend       = backend{}
	_ dispatch.LifecycleBackend = backend{}
	_ dispatch.ScheduleBackend  = backend{}
	_ dispatch.RuleBackend      = backend{}
)

// processor returns partition p's processor after checking that p owns the
// invocation id: an ingress with another partition count must be refused,
// not answered from a partition where lookups will never look.
func (b backend) processor(p uint32, id []byte) (*partition.Processor, error) {
	if err := b.checkPartition(p); err != nil {
		return nil, err
	}
	if err := invocation.CheckOwner(id, p, b.count); err != nil {
		return nil, fmt.Errorf("%w: %w", rpc.ErrInvalid, err)
	}
	return b.local(p)
}

func (b backend) checkPartition(p uint32) error {
	if p == 0 || p > b.count {
		return fmt.Errorf("%w: no partition %d on this cluster (1..%d)", rpc.ErrInvalid, p, b.count)
	}
	return nil
}

// local returns partition p's processor here, or, when this node holds no
// replica of p, a NotLeaderError naming the leader gossip knows, so the
// caller goes there at once.
func (b backend) local(p uint32) (*partition.Processor, error) {
	if proc := b.parts.get(p); proc != nil {
		return proc, nil
	}
	leader, term, _ := b.hints.Leader(p)
	return nil, &rpc.NotLeaderError{Leader: leader, Term: term}
}

// leaderHints is gossip's partition → leader table.
type leaderHints interface {
	Leader(partition uint32) (leader, term uint64, ok bool)
}

func (b backend) Append(ctx context.Context, p uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	proc, err := b.processor(p, inv.GetInvocationId())
	if err != nil {
		return nil, err
	}
	return proc.Append(ctx, inv)
}

func (b backend) Call(ctx context.Context, p uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	proc, err := b.processor(p, inv.GetInvocationId())
	if err != nil {
		return nil, err
	}
	return proc.Call(ctx, inv)
}

func (b backend) Output(ctx context.Context, p uint32, id []byte) (*rpc.InvocationResult, error) {
	proc, err := b.processor(p, id)
	if err != nil {
		return nil, err
	}
	return proc.Output(ctx, id)
}

func (b backend) Attach(ctx context.Context, p uint32, id []byte) (*rpc.InvocationResult, error) {
	proc, err := b.processor(p, id)
	if err != nil {
		return nil, err
	}
	return proc.Attach(ctx, id)
}

func (b backend) Status(ctx context.Context, p uint32, id []byte) (*rpc.InvocationRecord, error) {
	proc, err := b.processor(p, id)
	if err != nil {
		return nil, err
	}
	return proc.Status(ctx, id)
}

func (b backend) Cancel(ctx context.Context, p uint32, requestID, id []byte) error {
	proc, err := b.processor(p, id)
	if err != nil {
		return err
	}
	return proc.Cancel(ctx, requestID, id)
}

func (b backend) Action(ctx context.Context, p uint32, requestID []byte, a *rpc.InvocationAction) (*rpc.Appended, error) {
	proc, err := b.processor(p, a.GetInvocationId())
	if err != nil {
		return nil, err
	}
	return proc.Action(ctx, requestID, a)
}

// partition returns partition p's processor here (bulk operations name
// no invocation), or where to go.
func (b backend) partition(p uint32) (*partition.Processor, error) {
	if err := b.checkPartition(p); err != nil {
		return nil, err
	}
	return b.local(p)
}

func (b backend) Bulk(ctx context.Context, p uint32, requestID []byte, req *rpc.BulkRequest) (*rpc.Operation, error) {
	proc, err := b.partition(p)
	if err != nil {
		return nil, err
	}
	return proc.Bulk(ctx, requestID, req)
}

func (b backend) Operation(ctx context.Context, p uint32, id string) (*rpc.Operation, error) {
	proc, err := b.partition(p)
	if err != nil {
		return nil, err
	}
	return proc.Operation(ctx, id)
}

func (b backend) KeyStatus(ctx context.Context, p uint32, service, key string) (*rpc.KeyState, error) {
	if err := b.checkPartition(p); err != nil {
		return nil, err
	}
	if owner := invocation.PartitionFor(invocation.KeyedPartitionKey(service, key), b.count); owner != p {
		return nil, fmt.Errorf("%w: key %q of %q belongs to partition %d, not %d", rpc.ErrInvalid, key, service, owner, p)
	}
	proc, err := b.local(p)
	if err != nil {
		return nil, err
	}
	return proc.KeyStatus(ctx, service, key)
}

func (b backend) Backlog(ctx context.Context, p uint32, service string) (*rpc.ServiceBacklog, error) {
	if err := b.checkPartition(p); err != nil {
		return nil, err
	}
	proc, err := b.local(p)
	if err != nil {
		return nil, err
	}
	return proc.Backlog(ctx, service)
}

func (b backend) List(ctx context.Context, p uint32, req *rpc.ListInvocations) (*rpc.InvocationList, error) {
	if err := b.checkPartition(p); err != nil {
		return nil, err
	}
	proc, err := b.local(p)
	if err != nil {
		return nil, err
	}
	return proc.List(ctx, req)
}

func (b backend) Schedule(ctx context.Context, p uint32, req *rpc.ScheduleRequest) (*rpc.ScheduleList, error) {
	if err := b.checkPartition(p); err != nil {
		return nil, err
	}
	proc, err := b.local(p)
	if err != nil {
		return nil, err
	}
	return proc.Schedule(ctx, req)
}

func (b backend) PutService(ctx context.Context, svc *rpc.Service) error {
	return b.writes.Put(ctx, svc)
}

func (b backend) DeleteService(ctx context.Context, name string) error {
	return b.writes.Delete(ctx, name)
}

func (b backend) FenceService(ctx context.Context, p uint32, requestID []byte, service string, index uint64) error {
	if err := b.checkPartition(p); err != nil {
		return err
	}
	proc, err := b.local(p)
	if err != nil {
		return err
	}
	return proc.Fence(ctx, requestID, service, index)
}

func (b backend) PutRule(ctx context.Context, rule *rpc.Rule, expected uint64) (*rpc.Rule, error) {
	return b.writes.Registry.PutRule(ctx, rule, expected)
}

func (b backend) DeleteRule(ctx context.Context, pattern string, expected uint64) error {
	return b.writes.Registry.DeleteRule(ctx, pattern, expected)
}

// registryView is the admin API's service registry: writes go through the
// dispatch client to the metadata group's leader, reads are local.
type registryView struct {
	client   *dispatch.Client
	registry *registry.Registry
}

func (r registryView) PutService(ctx context.Context, svc *rpc.Service) error {
	return r.client.PutService(ctx, svc)
}

func (r registryView) DeleteService(ctx context.Context, name string) error {
	return r.client.DeleteService(ctx, name)
}

// CatchUp lets the admin API read its own writes (and everyone's):
// this replica first applies what the metadata leader committed, waiting
// at most registry.CatchUpTimeout.
func (r registryView) CatchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, registry.CatchUpTimeout)
	defer cancel()
	return r.registry.CatchUp(ctx)
}

func (r registryView) Lookup(name string) (*rpc.Service, bool) { return r.registry.Lookup(name) }
func (r registryView) List() []*rpc.Service                    { return r.registry.List() }

func (r registryView) PutRule(ctx context.Context, rule *rpc.Rule, expected uint64) (*rpc.Rule, error) {
	return r.client.PutRule(ctx, rule, expected)
}

func (r registryView) DeleteRule(ctx context.Context, pattern string, expected uint64) error {
	return r.client.DeleteRule(ctx, pattern, expected)
}

func (r registryView) Rules() []*rpc.Rule { return r.registry.Rules() }

// clusterView is the admin API's view of the cluster from this node.
type clusterView struct{ n *Server }

func (c clusterView) Nodes() []admin.NodeStatus {
	members := c.n.members.Members()
	out := make([]admin.NodeStatus, 0, len(members))
	for _, m := range members {
		out = append(out, admin.NodeStatus{ID: m.ID, IngressAddr: m.IngressAddr, AdminAddr: m.AdminAddr, NodeAddr: m.NodeAddr,
			GossipAddr: m.GossipAddr, Alive: m.Alive})
	}
	return out
}

func (c clusterView) Partitions(withDigest bool) []admin.PartitionStatus {
	out := make([]admin.PartitionStatus, 0, c.n.cfg.Partitions+1)
	for id := uint32(0); id <= c.n.cfg.Partitions; id++ {
		g := c.n.raft.Group(raftlog.GroupID(id))
		if g == nil {
			continue
		}
		st := g.Status()
		ps := admin.PartitionStatus{ID: id, Leader: st.Leader, Term: st.Term, AppliedIndex: st.Applied}
		if withDigest {
			if d, err := g.StateDigest(); err == nil {
				ps.StateDigest, ps.DigestIndex = hex.EncodeToString(d.Hash[:]), d.Applied
			}
		}
		if id > 0 {
			ps.FirstKey, ps.LastKey = invocation.KeyRange(id, c.n.cfg.Partitions)
		}
		if st.IsLeader {
			for _, voter := range st.Voters {
				r := admin.ReplicaStatus{NodeID: voter, Match: st.Match[voter], Down: !st.Active[voter]}
				if !r.Down {
					lag := st.Committed - min(r.Match, st.Committed)
					r.Lag = &lag
				}
				ps.Replicas = append(ps.Replicas, r)
			}
			if proc := c.n.parts.get(id); proc != nil {
				depth := proc.OutboxDepth()
				ps.OutboxDepth = &depth
			}
		}
		out = append(out, ps)
	}
	return out
}

// Ready: this node can serve when it knows a leader for every group (of
// the partitions it holds no replica of, from gossip).
func (c clusterView) Ready() bool {
	for id := uint32(0); id <= c.n.cfg.Partitions; id++ {
		if g := c.n.raft.Group(raftlog.GroupID(id)); g != nil {
			if g.Status().Leader == 0 {
				return false
			}
		} else if _, _, ok := c.n.members.Leader(id); !ok { // a partition held elsewhere
			return false
		}
	}
	return true
}
