package server

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

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
	registry   *registry.Registry
	processors []*partition.Processor
	// fences reaches every partition's leader (the node's dispatch client).
	fences fencer
}

// fencer tells one partition's leader of a registry change.
type fencer interface {
	FenceService(ctx context.Context, partition uint32, service string, index uint64) error
}

var (
	_ dispatch.Backend    = backend{}
	_ dispatch.KeyBackend = backend{}
)

// processor returns partition p's processor after checking that p owns the
// invocation id: an ingress with another partition count must be refused,
// not answered from a partition where lookups will never look.
func (b backend) processor(p uint32, id []byte) (*partition.Processor, error) {
	n := uint32(len(b.processors) - 1)
	if p == 0 || p > n {
		return nil, fmt.Errorf("%w: no partition %d on this cluster (1..%d)", rpc.ErrInvalid, p, n)
	}
	if err := invocation.CheckOwner(id, p, n); err != nil {
		return nil, fmt.Errorf("%w: %w", rpc.ErrInvalid, err)
	}
	return b.processors[p], nil
}

func (b backend) Append(ctx context.Context, p uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	proc, err := b.processor(p, inv.GetInvocationId())
	if err != nil {
		return nil, err
	}
	return proc.Append(ctx, inv)
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

func (b backend) KeyStatus(ctx context.Context, p uint32, service, key string) (*rpc.KeyState, error) {
	n := uint32(len(b.processors) - 1)
	if p == 0 || p > n {
		return nil, fmt.Errorf("%w: no partition %d on this cluster (1..%d)", rpc.ErrInvalid, p, n)
	}
	if owner := invocation.PartitionFor(invocation.KeyedPartitionKey(service, key), n); owner != p {
		return nil, fmt.Errorf("%w: key %q of %q belongs to partition %d, not %d", rpc.ErrInvalid, key, service, owner, p)
	}
	return b.processors[p].KeyStatus(ctx, service, key)
}

func (b backend) List(ctx context.Context, p uint32, req *rpc.ListInvocations) (*rpc.InvocationList, error) {
	n := uint32(len(b.processors) - 1)
	if p == 0 || p > n {
		return nil, fmt.Errorf("%w: no partition %d on this cluster (1..%d)", rpc.ErrInvalid, p, n)
	}
	return b.processors[p].List(ctx, req)
}

// PutService registers svc, then fences every partition at the change, so
// that once it is answered no invocation checked against an older
// registration of svc is accepted anywhere (the ingress checks its local
// registry copy, not a caught-up one, on a hit).
func (b backend) PutService(ctx context.Context, svc *rpc.Service) error {
	index, err := b.registry.Put(ctx, svc)
	if err != nil {
		return err
	}
	return b.fenceAll(ctx, svc.GetName(), index)
}

// DeleteService removes a service and fences every partition at the
// removal. A service found missing is fenced too, at the index where it was
// found missing: a retry after a fan-out that failed half-way completes it.
func (b backend) DeleteService(ctx context.Context, name string) error {
	index, err := b.registry.Delete(ctx, name)
	if err != nil && (!errors.Is(err, rpc.ErrNotFound) || index == 0) {
		return err
	}
	if ferr := b.fenceAll(ctx, name, index); ferr != nil {
		return ferr
	}
	return err
}

// fenceAll fences service at index in every partition, in parallel.
func (b backend) fenceAll(ctx context.Context, service string, index uint64) error {
	n := uint32(len(b.processors) - 1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for p := uint32(1); p <= n; p++ {
		wg.Go(func() {
			if err := b.fences.FenceService(ctx, p, service, index); err != nil {
				errs[p] = fmt.Errorf("partition %d: %w", p, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// Only ErrUnavailable is wrapped: a partition's lost leadership must
		// not make the dispatch client repeat the whole change by itself.
		return fmt.Errorf("service %q changed (metadata index %d), but not every partition has been told yet; retrying the request is safe: %w (%v)",
			service, index, rpc.ErrUnavailable, err)
	}
	return nil
}

func (b backend) FenceService(ctx context.Context, p uint32, requestID []byte, service string, index uint64) error {
	n := uint32(len(b.processors) - 1)
	if p == 0 || p > n {
		return fmt.Errorf("%w: no partition %d on this cluster (1..%d)", rpc.ErrInvalid, p, n)
	}
	return b.processors[p].Fence(ctx, requestID, service, index)
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
// at most registryCatchUp.
func (r registryView) CatchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, registryCatchUp)
	defer cancel()
	return r.registry.CatchUp(ctx)
}

func (r registryView) Lookup(name string) (*rpc.Service, bool) { return r.registry.Lookup(name) }
func (r registryView) List() []*rpc.Service                    { return r.registry.List() }

// registryCatchUp bounds how long a registry read waits for this replica
// to catch up with the metadata group's leader before it answers that it
// cannot tell (the ingress and the admin API then answer 503): the
// ingress's on a miss, the invoker's on a miss, the admin API's before GET
// /services. The read index travels on the same peer streams as the
// partitions' appends, so under load it waits behind them as long as an
// append does.
const registryCatchUp = 2 * time.Second

// currentServices is the ingress's service lookup. A hit in this node's
// registry replica is answered at once when the registration carries the
// index it was applied at: the partition refuses the invocation if the
// service changed since (a put or delete is answered only after every
// partition was fenced at it, backend.fenceAll), so a removal answered
// through another node still gets its 404 (issue 15, item 3) without a read
// round on every call. A miss, or a registration from before indexes
// existed, first catches up with the metadata group's leader, so a service
// registered through another node a moment ago is found.
type currentServices struct{ registry *registry.Registry }

func (c currentServices) Lookup(ctx context.Context, name string) (*rpc.Service, error) {
	if svc, ok := c.registry.Lookup(name); ok && svc.GetRegisteredIndex() != 0 {
		return svc, nil
	}
	return c.LookupCurrent(ctx, name)
}

// LookupCurrent answers after catching up, hit or miss.
func (c currentServices) LookupCurrent(ctx context.Context, name string) (*rpc.Service, error) {
	ctx, cancel := context.WithTimeout(ctx, registryCatchUp)
	defer cancel()
	return c.registry.LookupCurrent(ctx, name)
}

// invokerServices is the invoker's service lookup. A service this replica
// holds is delivered to at once: the ingress only accepted the invocation
// after a catch-up, and a removal answered since reaches this replica
// within a round trip, after which the next delivery fails for good. A
// miss catches up first (the registration may not have reached this
// replica yet) and is then a removal; when the replica cannot catch up,
// the delivery is retried later rather than failed.
type invokerServices struct{ registry *registry.Registry }

func (s invokerServices) Lookup(name string) (*rpc.Service, error) {
	if svc, ok := s.registry.Lookup(name); ok {
		return svc, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), registryCatchUp)
	defer cancel()
	return s.registry.LookupCurrent(ctx, name)
}

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
				match := st.Match[voter]
				var lag uint64
				if st.Committed > match {
					lag = st.Committed - match
				}
				ps.Replicas = append(ps.Replicas, admin.ReplicaStatus{NodeID: voter, Match: match, Lag: lag})
			}
			if id > 0 {
				depth := c.n.processors[id].OutboxDepth()
				ps.OutboxDepth = &depth
			}
		}
		out = append(out, ps)
	}
	return out
}

// Ready: this node can serve when it knows a leader for every group.
func (c clusterView) Ready() bool {
	for id := uint32(0); id <= c.n.cfg.Partitions; id++ {
		g := c.n.raft.Group(raftlog.GroupID(id))
		if g == nil || g.Status().Leader == 0 {
			return false
		}
	}
	return true
}
