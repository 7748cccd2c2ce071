package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/ingress/dispatch"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/partition"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// localPartitions are the partitions this node holds a replica of, each
// with its processor. With placement (package cluster) a partition comes
// to a node and leaves it while the node runs; readers take the processor
// of the moment.
type localPartitions struct {
	mu    sync.RWMutex
	procs map[uint32]*localPartition
}

type localPartition struct {
	proc *partition.Processor
	reg  *trackedRegisterer
}

// get returns partition p's processor, nil when p has no replica here.
func (l *localPartitions) get(p uint32) *partition.Processor {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if lp := l.procs[p]; lp != nil {
		return lp.proc
	}
	return nil
}

// ids lists the partitions held here, in order.
func (l *localPartitions) ids() []uint32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]uint32, 0, len(l.procs))
	for p := range l.procs {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (l *localPartitions) put(p uint32, lp *localPartition) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.procs == nil {
		l.procs = map[uint32]*localPartition{}
	}
	l.procs[p] = lp
}

func (l *localPartitions) remove(p uint32) *localPartition {
	l.mu.Lock()
	defer l.mu.Unlock()
	lp := l.procs[p]
	delete(l.procs, p)
	return lp
}

// all returns every processor, for shutdown.
func (l *localPartitions) all() []*partition.Processor {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]*partition.Processor, 0, len(l.procs))
	for _, lp := range l.procs {
		out = append(out, lp.proc)
	}
	return out
}

// openPartition starts partition p's processor and opens its replica: the
// one this node's state holds, a first node's bootstrap replica, or (blank)
// a new replica the partition's leader adds as a learner.
func (n *Server) openPartition(p uint32, how openHow) error {
	reg := &trackedRegisterer{reg: n.registerer}
	pc := partition.DefaultConfig()
	pc.Partition = p
	pc.Partitions = n.cfg.Partitions
	pc.Retention = n.cfg.Retention
	pc.Invoker.Retry = defaultRetry(n.cfg)
	pc.Callbacks.Allow = callbackAllowList(n.cfg)
	pc.Callbacks.Secret = []byte(n.cfg.CallbackSecret)
	pc.BulkChunk = n.cfg.BulkChunk
	pc.Services = registry.InvokerLookup{Registry: n.registry}
	pc.Dispatch = &n.scheduleRuns
	pc.Logger = n.log
	pc.Registerer = reg
	proc, err := partition.New(pc)
	if err != nil {
		reg.release()
		return err
	}
	// The processor is in the table before its group opens: no leadership
	// event of the group can miss it.
	n.parts.put(p, &localPartition{proc: proc, reg: reg})
	var g *raftlog.Group
	switch how {
	case openStored:
		g, err = n.raft.OpenGroup(raftlog.GroupID(p), proc)
	case openBootstrap:
		g, err = n.addGroup(raftlog.GroupID(p), proc)
	case openBlank:
		g, err = n.raft.JoinGroup(raftlog.GroupID(p), raftlog.ReplicaID(n.cfg.NodeID, n.cluster.State().Generation(p, n.cfg.NodeID)), proc)
	}
	if err != nil {
		n.parts.remove(p)
		_ = proc.Close()
		reg.release()
		return fmt.Errorf("partition %d: %w", p, err)
	}
	proc.Start(g)
	return nil
}

// openHow says which replica openPartition opens.
type openHow int

const (
	openStored    openHow = iota // the replica in this node's state
	openBootstrap                // a first node's replica at bootstrap
	openBlank                    // a new replica, blank until its snapshot
)

// closePartition stops partition p's processor and deletes its replica,
// which has left the group's configuration.
func (n *Server) closePartition(p uint32) error {
	lp := n.parts.remove(p)
	if lp == nil {
		return nil
	}
	_ = lp.proc.Close()
	lp.reg.release()
	return n.raft.RemoveGroup(raftlog.GroupID(p))
}

// trackedRegisterer registers a processor's metrics and unregisters them
// when the processor goes (a partition may come back later).
type trackedRegisterer struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	cs  []prometheus.Collector
}

func (t *trackedRegisterer) Register(c prometheus.Collector) error {
	if t.reg == nil {
		return nil
	}
	if err := t.reg.Register(c); err != nil {
		return err
	}
	t.mu.Lock()
	t.cs = append(t.cs, c)
	t.mu.Unlock()
	return nil
}

func (t *trackedRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *trackedRegisterer) Unregister(c prometheus.Collector) bool {
	if t.reg == nil {
		return false
	}
	return t.reg.Unregister(c)
}

func (t *trackedRegisterer) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cs {
		t.reg.Unregister(c)
	}
	t.cs = nil
}

// placedOn reports whether the record's target places a replica of
// partition p on node. A node that is only in the configuration the
// leader last recorded, with no replica of p stored, had its replica
// deleted: it left, and a blank one would be of no generation the group
// knows.
func placedOn(st *cluster.State, p uint32, node uint64) bool {
	pl, ok := st.Placement(p)
	return ok && slices.Contains(pl.Replicas, node)
}

// scheduleDispatch is partition.Dispatch over the node's dispatch client,
// which is made after the stored partitions open: until then it answers
// rpc.ErrUnavailable (the partition retries).
type scheduleDispatch struct {
	client     atomic.Pointer[dispatch.Client]
	partitions uint32
}

func (d *scheduleDispatch) Append(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
	c := d.client.Load()
	if c == nil {
		return nil, fmt.Errorf("schedule dispatch: node starting: %w", rpc.ErrUnavailable)
	}
	id, err := invocation.IDFromBytes(inv.GetInvocationId())
	if err != nil {
		return nil, fmt.Errorf("schedule dispatch: %v: %w", err, rpc.ErrInvalid)
	}
	return c.Append(ctx, invocation.PartitionFor(id.PartitionKey(), d.partitions), inv)
}
