package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/proposals"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// Result is what an applied cluster command answers.
type Result struct {
	// Node is the node the command concerned, as it stands after it.
	Node *rpc.ClusterNode
	// ClusterID is the cluster's id (InitCluster, JoinNode).
	ClusterID []byte
	// Index is the metadata log index the command applied at.
	Index uint64
}

// Log is what the cluster record needs of the metadata group;
// *raftlog.Group satisfies it.
type Log interface {
	proposals.Proposer
	Status() raftlog.Status
}

// Cluster is this replica's copy of the cluster record and the way to
// change it. State is safe for concurrent use; commands are leader-only.
type Cluster struct {
	logger zerolog.Logger
	log    Log
	ready  chan struct{} // closed by Start

	state   atomic.Pointer[State]
	tracker *proposals.Tracker[Result]
	// applied is the state after the last Apply, which its Reveal has not
	// published yet: the applier may apply a group's next entries in the
	// same batch, before that Reveal, and they must build on it (applier
	// goroutine only; nil when state is current).
	applied *State

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at each change; guarded by mu
}

// maxPending bounds concurrent commands on the leader.
const maxPending = 256

// New returns an empty cluster record; raftlog's AddGroup restores it
// (through Machine).
func New(logger zerolog.Logger) *Cluster {
	c := &Cluster{
		logger:  logger.With().Str("component", "cluster").Logger(),
		ready:   make(chan struct{}),
		tracker: proposals.NewTracker[Result](maxPending),
		changed: make(chan struct{}),
	}
	c.state.Store(&State{})
	return c
}

// Start lets the cluster propose through log (the metadata group).
func (c *Cluster) Start(log Log) {
	c.log = log
	if _, _, term := c.tracker.Leadership(); term == 0 {
		st := log.Status()
		c.tracker.SetLeadership(st.Leader, st.Term, st.IsLeader)
	}
	close(c.ready)
}

// OnLeadership records a leadership change of the metadata group; any loss
// fails pending commands with rpc.ErrLostLeadership. Never blocks.
func (c *Cluster) OnLeadership(ev raftlog.LeaderEvent) {
	if ev.Group == raftlog.MetaGroup {
		c.tracker.SetLeadership(ev.Leader, ev.Term, ev.IsSelf)
	}
}

// State returns the applied cluster record. Callers must not modify it.
func (c *Cluster) State() *State { return c.state.Load() }

// Changed returns a channel closed at the next change of State.
func (c *Cluster) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// NewClusterID returns a random cluster id for Init.
func NewClusterID() []byte {
	id := make([]byte, ClusterIDLen)
	_, _ = rand.Read(id)
	return id
}

// Init proposes the cluster record with nodes, all active; once one is
// applied, it answers with the existing id (ErrWrongCluster if it is not
// id).
func (c *Cluster) Init(ctx context.Context, id []byte, nodes []*rpc.ClusterNode) (Result, error) {
	return c.InitWith(ctx, id, nodes, 0, nil)
}

// Join gives node (its JoinNonce set) an id, or the one its nonce already
// has; clusterID, when not empty, must be this cluster's.
func (c *Cluster) Join(ctx context.Context, node *rpc.ClusterNode, clusterID []byte) (Result, error) {
	rid := invocation.NewRequestID()
	return c.propose(ctx, rid, &rpc.Command{Cmd: &rpc.Command_JoinNode{JoinNode: &rpc.JoinNode{RequestId: rid, Node: node, ClusterId: clusterID}}})
}

// SetState moves node id from state from to state to (ErrStateConflict if
// it is not in from).
func (c *Cluster) SetState(ctx context.Context, id uint64, from, to rpc.NodeState) (Result, error) {
	rid := invocation.NewRequestID()
	return c.propose(ctx, rid, &rpc.Command{Cmd: &rpc.Command_SetNodeState{SetNodeState: &rpc.SetNodeState{RequestId: rid, Id: id, From: from, To: to}}})
}

// InitWith is Init with the replication factor and the partitions' first
// placements (InitCluster).
func (c *Cluster) InitWith(ctx context.Context, id []byte, nodes []*rpc.ClusterNode, replication uint32, placements []*rpc.PartitionPlacement) (Result, error) {
	rid := invocation.NewRequestID()
	return c.propose(ctx, rid, &rpc.Command{Cmd: &rpc.Command_InitCluster{InitCluster: &rpc.InitCluster{RequestId: rid, ClusterId: id, Nodes: nodes, Replication: replication, Placements: placements}}})
}

// SetPlacements changes partitions' target placements, each only if its
// Version is the stored one (ErrStateConflict otherwise).
func (c *Cluster) SetPlacements(ctx context.Context, placements []*rpc.PartitionPlacement) error {
	rid := invocation.NewRequestID()
	_, err := c.propose(ctx, rid, &rpc.Command{Cmd: &rpc.Command_SetPlacement{SetPlacement: &rpc.SetPlacement{RequestId: rid, Placements: placements}}})
	return err
}

// Observe records a partition's configuration as its leader applied it.
func (c *Cluster) Observe(ctx context.Context, observed *rpc.PartitionPlacement) error {
	rid := invocation.NewRequestID()
	_, err := c.propose(ctx, rid, &rpc.Command{Cmd: &rpc.Command_ObserveConfig{ObserveConfig: &rpc.ObserveConfig{RequestId: rid, Observed: observed}}})
	return err
}

// SetPolicy changes the replication factor and pauses or resumes
// rebalancing.
func (c *Cluster) SetPolicy(ctx context.Context, replication uint32, paused bool) error {
	rid := invocation.NewRequestID()
	_, err := c.propose(ctx, rid, &rpc.Command{Cmd: &rpc.Command_SetPlacementPolicy{SetPlacementPolicy: &rpc.SetPlacementPolicy{RequestId: rid, Replication: replication, Paused: paused}}})
	return err
}

// UpdateAddrs records the addresses and zone node announces.
func (c *Cluster) UpdateAddrs(ctx context.Context, node *rpc.ClusterNode) (Result, error) {
	rid := invocation.NewRequestID()
	return c.propose(ctx, rid, &rpc.Command{Cmd: &rpc.Command_UpdateNodeAddrs{UpdateNodeAddrs: &rpc.UpdateNodeAddrs{RequestId: rid, Node: node}}})
}

func (c *Cluster) propose(ctx context.Context, requestID []byte, cmd *rpc.Command) (Result, error) {
	select {
	case <-c.ready:
	default:
		return Result{}, &rpc.NotLeaderError{}
	}
	data, err := rpc.EncodeBatch(cmd)
	if err != nil {
		return Result{}, err
	}
	return proposals.ProposeAndWait(ctx, c.tracker, c.log, requestID, data, c.proposeError)
}

// proposeError maps a refused Propose to the errors callers branch on.
func (c *Cluster) proposeError(err error) error {
	var nl *raftlog.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return &rpc.NotLeaderError{Leader: nl.Leader, Term: nl.Term}
	case errors.Is(err, raftlog.ErrProposalDropped), errors.Is(err, raftlog.ErrStopped):
		st := c.log.Status()
		return &rpc.NotLeaderError{Leader: st.Leader, Term: st.Term}
	}
	return fmt.Errorf("cluster: propose: %w", err)
}

// outcome is one applied command's reply, handed to its waiter at Reveal.
type outcome struct {
	requestID []byte
	term      uint64
	reply     proposals.Reply[Result]
}

// applyEntries applies the cluster commands of entries (each entry's
// batch holds cluster commands only; Machine routes them here).
func (c *Cluster) applyEntries(root *bolt.Bucket, entries []decoded) (raftlog.Applied, error) {
	if len(entries) == 0 {
		return raftlog.Applied{}, nil
	}
	b, err := root.CreateBucketIfNotExists(bucketCluster)
	if err != nil {
		return raftlog.Applied{}, fmt.Errorf("cluster: create bucket: %w", err)
	}
	base := c.applied
	if base == nil {
		base = c.state.Load()
	}
	t := &tx{b: b, next: base}
	var outcomes []outcome
	for _, e := range entries {
		for _, cmd := range e.batch.Commands {
			res, refused, failure := t.apply(e.Index, cmd)
			if failure != nil {
				return raftlog.Applied{}, fmt.Errorf("cluster: entry %d: %w", e.Index, failure)
			}
			outcomes = append(outcomes, outcome{requestID: requestIDOf(cmd), term: e.Term, reply: proposals.Reply[Result]{Value: res, Err: refused}})
		}
	}
	next, changed := t.next, t.dirty
	if changed {
		c.applied = next
	}
	return raftlog.Applied{Reveal: func() {
		if changed {
			if c.applied == next {
				c.applied = nil
			}
			c.state.Store(next)
			c.mu.Lock()
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
		for _, o := range outcomes {
			c.tracker.Resolve(o.requestID, o.term, o.reply)
		}
	}}, nil
}

// restore reloads the record from the metadata group's bucket.
func (c *Cluster) restore(root *bolt.Bucket) error {
	s, err := load(root.Bucket(bucketCluster))
	if err != nil {
		return err
	}
	c.applied = nil
	c.state.Store(s)
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	return nil
}

func requestIDOf(c *rpc.Command) []byte {
	switch cmd := c.Cmd.(type) {
	case *rpc.Command_InitCluster:
		return cmd.InitCluster.RequestId
	case *rpc.Command_JoinNode:
		return cmd.JoinNode.RequestId
	case *rpc.Command_SetNodeState:
		return cmd.SetNodeState.RequestId
	case *rpc.Command_UpdateNodeAddrs:
		return cmd.UpdateNodeAddrs.RequestId
	case *rpc.Command_SetPlacement:
		return cmd.SetPlacement.RequestId
	case *rpc.Command_ObserveConfig:
		return cmd.ObserveConfig.RequestId
	case *rpc.Command_SetPlacementPolicy:
		return cmd.SetPlacementPolicy.RequestId
	case *rpc.Command_SetFlowShares:
		return cmd.SetFlowShares.RequestId
	}
	return nil
}

// isClusterCommand reports whether c belongs to the cluster record.
func isClusterCommand(c *rpc.Command) bool {
	switch c.Cmd.(type) {
	case *rpc.Command_InitCluster, *rpc.Command_JoinNode, *rpc.Command_SetNodeState, *rpc.Command_UpdateNodeAddrs,
		*rpc.Command_SetPlacement, *rpc.Command_ObserveConfig, *rpc.Command_SetPlacementPolicy, *rpc.Command_SetFlowShares:
		return true
	}
	return false
}
