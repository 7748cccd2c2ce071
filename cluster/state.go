package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/rpc"
)

// Errors of cluster commands. They are outcomes of applied entries, the
// same on every replica.
var (
	// ErrNoCluster: the cluster record is not initialised yet (a joiner
	// retries).
	ErrNoCluster = errors.New("cluster: not initialised yet")
	// ErrWrongCluster: the caller belongs to another cluster.
	ErrWrongCluster = errors.New("cluster: another cluster")
	// ErrRemoved: the node was removed from the cluster; its id is never
	// given out again.
	ErrRemoved = errors.New("cluster: node removed")
	// ErrStateConflict: a SetNodeState whose expected state is not the
	// node's (another controller acted first, or the caller is stale).
	ErrStateConflict = errors.New("cluster: node state changed meanwhile")
)

// ClusterIDLen is the length of a cluster id.
const ClusterIDLen = 16

// State is an immutable view of the cluster record as applied on this
// replica.
type State struct {
	// ID is the cluster id; nil until InitCluster applied.
	ID []byte
	// Nodes are every node ever given an id, removed ones included, by id.
	Nodes []*rpc.ClusterNode
	// NextID is the id the next joiner gets.
	NextID uint64
	// Replication is the number of replicas of each partition (fewer
	// while there are fewer nodes); Paused stops rebalancing (repairs go
	// on).
	Replication uint32
	Paused      bool
	// Placements are the partitions' placements by partition (0, the
	// metadata group, has only its observed configuration).
	Placements []*rpc.PartitionPlacement
	// Shares are the splits of the concurrency limits among the
	// partitions, by key (shares.go).
	Shares []*rpc.FlowShares
	// Index is the metadata log index of the last change.
	Index uint64
}

// Node returns node id.
func (s *State) Node(id uint64) (*rpc.ClusterNode, bool) {
	i, ok := slices.BinarySearchFunc(s.Nodes, id, func(n *rpc.ClusterNode, id uint64) int { return cmpU64(n.Id, id) })
	if !ok {
		return nil, false
	}
	return s.Nodes[i], true
}

// Members returns the nodes that are not removed, by id.
func (s *State) Members() []*rpc.ClusterNode {
	out := make([]*rpc.ClusterNode, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		if n.State != rpc.NodeState_NODE_STATE_REMOVED {
			out = append(out, n)
		}
	}
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Bucket layout beneath the metadata group's state bucket:
//
//	cluster  "id"    → the cluster id (16 bytes)
//	         "next"  → the next node id (8 bytes big-endian)
//	         "nodes" → bucket: node id (8 bytes big-endian) → rpc.ClusterNode
var (
	bucketCluster = []byte("cluster")
	bucketNodes   = []byte("nodes")
	keyID         = []byte("id")
	keyNext       = []byte("next")
	keyPolicy     = []byte("policy")
	bucketPlaced  = []byte("placements")
)

// DefaultReplication is the replication of a record that does not say.
const DefaultReplication = 3

// Placement returns partition p's placement.
func (s *State) Placement(p uint32) (*rpc.PartitionPlacement, bool) {
	i, ok := slices.BinarySearchFunc(s.Placements, p, func(pl *rpc.PartitionPlacement, p uint32) int { return cmpU64(uint64(pl.Partition), uint64(p)) })
	if !ok {
		return nil, false
	}
	return s.Placements[i], true
}

// Generation is the replica generation of node in partition p's target
// (raftlog.ReplicaID).
func (s *State) Generation(p uint32, node uint64) uint32 {
	if pl, ok := s.Placement(p); ok {
		return pl.Generations[node]
	}
	return 0
}

// setPlacement puts pl in s.Placements in partition order.
func (s *State) setPlacement(pl *rpc.PartitionPlacement) {
	i, found := slices.BinarySearchFunc(s.Placements, pl.Partition, func(x *rpc.PartitionPlacement, p uint32) int { return cmpU64(uint64(x.Partition), uint64(p)) })
	if found {
		s.Placements[i] = pl
		return
	}
	s.Placements = slices.Insert(s.Placements, i, pl)
}

// storeMarshal is deterministic: every replica must store the same bytes.
var storeMarshal = proto.MarshalOptions{Deterministic: true}

// transitions lists the state changes SetNodeState allows.
var transitions = map[rpc.NodeState][]rpc.NodeState{
	rpc.NodeState_NODE_STATE_JOINING:  {rpc.NodeState_NODE_STATE_ACTIVE, rpc.NodeState_NODE_STATE_REMOVED},
	rpc.NodeState_NODE_STATE_ACTIVE:   {rpc.NodeState_NODE_STATE_DRAINING},
	rpc.NodeState_NODE_STATE_DRAINING: {rpc.NodeState_NODE_STATE_REMOVED, rpc.NodeState_NODE_STATE_ACTIVE},
}

// tx applies cluster commands to the bucket of one Apply; next is the
// state after them (copied on the first change).
type tx struct {
	b     *bolt.Bucket
	next  *State
	dirty bool
}

// mutable returns the state to change at index, copying it first if this
// Apply has not changed it yet (readers hold the old one).
func (t *tx) mutable(index uint64) *State {
	if !t.dirty {
		cp := *t.next
		cp.Nodes = slices.Clone(cp.Nodes)
		cp.Placements = slices.Clone(cp.Placements)
		cp.Shares = slices.Clone(cp.Shares)
		t.next, t.dirty = &cp, true
	}
	t.next.Index = index
	return t.next
}

// apply applies one cluster command at index; a refused command returns
// its outcome as err with a nil failure, a storage failure as failure.
func (t *tx) apply(index uint64, c *rpc.Command) (res Result, err, failure error) {
	switch cmd := c.Cmd.(type) {
	case *rpc.Command_InitCluster:
		res, err = t.init(index, cmd.InitCluster)
	case *rpc.Command_JoinNode:
		res, err = t.join(index, cmd.JoinNode)
	case *rpc.Command_SetNodeState:
		res, err = t.setState(index, cmd.SetNodeState)
	case *rpc.Command_UpdateNodeAddrs:
		res, err = t.updateAddrs(index, cmd.UpdateNodeAddrs)
	case *rpc.Command_SetPlacement:
		err = t.setPlacements(index, cmd.SetPlacement)
	case *rpc.Command_ObserveConfig:
		err = t.observe(index, cmd.ObserveConfig)
	case *rpc.Command_SetPlacementPolicy:
		err = t.setPolicy(index, cmd.SetPlacementPolicy)
	case *rpc.Command_SetFlowShares:
		err = t.setFlowShares(index, cmd.SetFlowShares)
	default:
		return Result{}, nil, fmt.Errorf("cluster: unexpected command %T", c.Cmd)
	}
	var se storeError
	if errors.As(err, &se) {
		return Result{}, nil, se.err
	}
	res.Index = index
	return res, err, nil
}

// storeError marks a bbolt failure, which stops the group, apart from a
// refused command.
type storeError struct{ err error }

func (e storeError) Error() string { return e.err.Error() }

func (t *tx) init(index uint64, cmd *rpc.InitCluster) (Result, error) {
	if t.next.ID != nil {
		if !bytes.Equal(t.next.ID, cmd.ClusterId) {
			return Result{ClusterID: t.next.ID}, fmt.Errorf("%w: this cluster is %x", ErrWrongCluster, t.next.ID)
		}
		return Result{ClusterID: t.next.ID}, nil
	}
	if len(cmd.ClusterId) != ClusterIDLen || len(cmd.Nodes) == 0 {
		return Result{}, fmt.Errorf("cluster: init needs a %d-byte id and nodes: %w", ClusterIDLen, rpc.ErrInvalid)
	}
	seen := map[uint64]bool{}
	for _, n := range cmd.Nodes {
		if n.Id == 0 || n.NodeAddr == "" || seen[n.Id] {
			return Result{}, fmt.Errorf("cluster: init: node %d without an address, or twice: %w", n.Id, rpc.ErrInvalid)
		}
		seen[n.Id] = true
	}
	for _, pl := range cmd.Placements {
		if pl.Partition == 0 || len(pl.Replicas) == 0 || slices.ContainsFunc(pl.Replicas, func(id uint64) bool { return !seen[id] }) {
			return Result{}, fmt.Errorf("cluster: init: partition %d placed on unknown nodes %v: %w", pl.Partition, pl.Replicas, rpc.ErrInvalid)
		}
	}
	s := t.mutable(index)
	s.ID = slices.Clone(cmd.ClusterId)
	s.Replication = cmd.Replication
	if s.Replication == 0 {
		s.Replication = DefaultReplication
	}
	for _, pl := range cmd.Placements {
		pl = proto.Clone(pl).(*rpc.PartitionPlacement)
		pl.Version = 1
		s.setPlacement(pl)
		if err := t.putPlacement(pl); err != nil {
			return Result{}, err
		}
	}
	if err := t.putPolicy(s); err != nil {
		return Result{}, err
	}
	for _, n := range cmd.Nodes {
		n = proto.Clone(n).(*rpc.ClusterNode)
		n.State = rpc.NodeState_NODE_STATE_ACTIVE
		n.ChangedIndex = index
		s.insert(n)
		s.NextID = max(s.NextID, n.Id+1)
	}
	if err := t.b.Put(keyID, s.ID); err != nil {
		return Result{}, storeError{err}
	}
	for _, n := range s.Nodes {
		if err := t.putNode(n); err != nil {
			return Result{}, err
		}
	}
	return Result{ClusterID: s.ID}, t.putNext(s.NextID)
}

func (t *tx) join(index uint64, cmd *rpc.JoinNode) (Result, error) {
	s := t.next
	if s.ID == nil {
		return Result{}, ErrNoCluster
	}
	if len(cmd.ClusterId) > 0 && !bytes.Equal(cmd.ClusterId, s.ID) {
		return Result{}, fmt.Errorf("%w: this cluster is %x, the joiner's data dir belongs to %x", ErrWrongCluster, s.ID, cmd.ClusterId)
	}
	in := cmd.Node
	if in == nil || in.NodeAddr == "" || len(in.JoinNonce) == 0 {
		return Result{}, fmt.Errorf("cluster: join needs a node address and a nonce: %w", rpc.ErrInvalid)
	}
	for _, n := range s.Nodes {
		if bytes.Equal(n.JoinNonce, in.JoinNonce) {
			// The same joiner again (its first answer was lost).
			if n.State == rpc.NodeState_NODE_STATE_REMOVED {
				return Result{Node: n}, fmt.Errorf("%w: node %d", ErrRemoved, n.Id)
			}
			return Result{Node: n, ClusterID: s.ID}, nil
		}
	}
	for _, n := range s.Members() {
		if n.NodeAddr == in.NodeAddr && n.Id != in.Replaces {
			return Result{}, fmt.Errorf("cluster: node %d already uses node address %s: %w", n.Id, in.NodeAddr, rpc.ErrInvalid)
		}
	}
	if in.Replaces != 0 {
		old, ok := s.Node(in.Replaces)
		switch {
		case !ok:
			return Result{}, fmt.Errorf("cluster: --replace %d: no such node: %w", in.Replaces, rpc.ErrNotFound)
		case old.State == rpc.NodeState_NODE_STATE_REMOVED:
			return Result{}, fmt.Errorf("cluster: --replace %d: %w", in.Replaces, ErrRemoved)
		}
	}
	n := proto.Clone(in).(*rpc.ClusterNode)
	s = t.mutable(index)
	n.Id = s.NextID
	n.State = rpc.NodeState_NODE_STATE_JOINING
	n.ChangedIndex = index
	s.NextID++
	s.insert(n)
	if err := t.putNode(n); err != nil {
		return Result{}, err
	}
	return Result{Node: n, ClusterID: s.ID}, t.putNext(s.NextID)
}

func (t *tx) setState(index uint64, cmd *rpc.SetNodeState) (Result, error) {
	n, ok := t.next.Node(cmd.Id)
	if !ok {
		return Result{}, fmt.Errorf("cluster: node %d: %w", cmd.Id, rpc.ErrNotFound)
	}
	if n.State != cmd.From {
		return Result{Node: n}, fmt.Errorf("%w: node %d is %s, not %s", ErrStateConflict, n.Id, StateName(n.State), StateName(cmd.From))
	}
	if !slices.Contains(transitions[cmd.From], cmd.To) {
		return Result{Node: n}, fmt.Errorf("cluster: node %d: %s → %s is not a state change: %w", n.Id, StateName(cmd.From), StateName(cmd.To), rpc.ErrInvalid)
	}
	n = proto.Clone(n).(*rpc.ClusterNode)
	n.State = cmd.To
	n.ChangedIndex = index
	t.mutable(index).insert(n)
	return Result{Node: n}, t.putNode(n)
}

func (t *tx) updateAddrs(index uint64, cmd *rpc.UpdateNodeAddrs) (Result, error) {
	in := cmd.Node
	if in == nil || in.NodeAddr == "" {
		return Result{}, fmt.Errorf("cluster: update needs a node address: %w", rpc.ErrInvalid)
	}
	n, ok := t.next.Node(in.Id)
	switch {
	case !ok:
		return Result{}, fmt.Errorf("cluster: node %d: %w", in.Id, rpc.ErrNotFound)
	case n.State == rpc.NodeState_NODE_STATE_REMOVED:
		return Result{Node: n}, fmt.Errorf("%w: node %d", ErrRemoved, n.Id)
	}
	n = proto.Clone(n).(*rpc.ClusterNode)
	n.NodeAddr, n.IngressAddr, n.AdminAddr, n.GossipAddr, n.Zone = in.NodeAddr, in.IngressAddr, in.AdminAddr, in.GossipAddr, in.Zone
	n.ChangedIndex = index
	t.mutable(index).insert(n)
	return Result{Node: n}, t.putNode(n)
}

func (t *tx) setPlacements(index uint64, cmd *rpc.SetPlacement) error {
	s := t.next
	if s.ID == nil {
		return ErrNoCluster
	}
	for _, in := range cmd.Placements {
		cur, ok := s.Placement(in.Partition)
		if ok && cur.Version != in.Version || !ok && in.Version != 0 {
			return fmt.Errorf("%w: partition %d's placement changed meanwhile", ErrStateConflict, in.Partition)
		}
		if in.Partition == 0 || len(in.Replicas) == 0 {
			return fmt.Errorf("cluster: placement of partition %d on %v: %w", in.Partition, in.Replicas, rpc.ErrInvalid)
		}
		for _, id := range in.Replicas {
			if n, ok := s.Node(id); !ok || n.State == rpc.NodeState_NODE_STATE_REMOVED {
				return fmt.Errorf("cluster: placement of partition %d on node %d, not a member: %w", in.Partition, id, rpc.ErrInvalid)
			}
		}
	}
	next := t.mutable(index)
	for _, in := range cmd.Placements {
		pl := &rpc.PartitionPlacement{Partition: in.Partition}
		if cur, ok := next.Placement(in.Partition); ok {
			pl = proto.Clone(cur).(*rpc.PartitionPlacement)
		}
		for _, id := range in.Replicas {
			if !slices.Contains(pl.Replicas, id) && pl.Version > 0 {
				if pl.Generations == nil {
					pl.Generations = map[uint64]uint32{}
				}
				pl.Generations[id] = uint32(in.Version + 1) // a new replica to raft
			}
		}
		for id := range pl.Generations {
			if !slices.Contains(in.Replicas, id) {
				delete(pl.Generations, id)
			}
		}
		pl.Replicas, pl.PreferredLeader, pl.Version = slices.Clone(in.Replicas), in.PreferredLeader, in.Version+1
		next.setPlacement(pl)
		if err := t.putPlacement(pl); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) observe(index uint64, cmd *rpc.ObserveConfig) error {
	in := cmd.Observed
	if in == nil {
		return fmt.Errorf("cluster: observe without a configuration: %w", rpc.ErrInvalid)
	}
	cur, ok := t.next.Placement(in.Partition)
	if ok && cur.ObservedIndex >= in.ObservedIndex {
		return nil // an older or the same report
	}
	pl := &rpc.PartitionPlacement{Partition: in.Partition}
	if ok {
		pl = proto.Clone(cur).(*rpc.PartitionPlacement)
	}
	pl.ObservedVoters, pl.ObservedLearners = slices.Clone(in.ObservedVoters), slices.Clone(in.ObservedLearners)
	pl.ObservedJoint, pl.ObservedIndex = in.ObservedJoint, in.ObservedIndex
	t.mutable(index).setPlacement(pl)
	return t.putPlacement(pl)
}

func (t *tx) setPolicy(index uint64, cmd *rpc.SetPlacementPolicy) error {
	if cmd.Replication < 1 {
		return fmt.Errorf("cluster: replication %d: %w", cmd.Replication, rpc.ErrInvalid)
	}
	s := t.mutable(index)
	s.Replication, s.Paused = cmd.Replication, cmd.Paused
	return t.putPolicy(s)
}

func (t *tx) putPlacement(pl *rpc.PartitionPlacement) error {
	b, err := t.b.CreateBucketIfNotExists(bucketPlaced)
	if err != nil {
		return storeError{err}
	}
	data, err := storeMarshal.Marshal(pl)
	if err != nil {
		return storeError{err}
	}
	if err := b.Put(binary.BigEndian.AppendUint32(nil, pl.Partition), data); err != nil {
		return storeError{err}
	}
	return nil
}

func (t *tx) putPolicy(s *State) error {
	data, err := storeMarshal.Marshal(&rpc.SetPlacementPolicy{Replication: s.Replication, Paused: s.Paused})
	if err != nil {
		return storeError{err}
	}
	if err := t.b.Put(keyPolicy, data); err != nil {
		return storeError{err}
	}
	return nil
}

// insert puts n in s.Nodes in id order, replacing a node of the same id.
func (s *State) insert(n *rpc.ClusterNode) {
	i, found := slices.BinarySearchFunc(s.Nodes, n.Id, func(m *rpc.ClusterNode, id uint64) int { return cmpU64(m.Id, id) })
	if found {
		s.Nodes[i] = n
		return
	}
	s.Nodes = slices.Insert(s.Nodes, i, n)
}

func (t *tx) putNode(n *rpc.ClusterNode) error {
	nb, err := t.b.CreateBucketIfNotExists(bucketNodes)
	if err != nil {
		return storeError{err}
	}
	data, err := storeMarshal.Marshal(n)
	if err != nil {
		return storeError{err}
	}
	if err := nb.Put(binary.BigEndian.AppendUint64(nil, n.Id), data); err != nil {
		return storeError{err}
	}
	return nil
}

func (t *tx) putNext(next uint64) error {
	if err := t.b.Put(keyNext, binary.BigEndian.AppendUint64(nil, next)); err != nil {
		return storeError{err}
	}
	return nil
}

// load reads the cluster record from b (the cluster bucket, or nil).
func load(b *bolt.Bucket) (*State, error) {
	s := &State{}
	if b == nil {
		return s, nil
	}
	if id := b.Get(keyID); id != nil {
		s.ID = slices.Clone(id)
	}
	if v := b.Get(keyNext); len(v) == 8 {
		s.NextID = binary.BigEndian.Uint64(v)
	}
	s.Replication = DefaultReplication
	if v := b.Get(keyPolicy); v != nil {
		p := &rpc.SetPlacementPolicy{}
		if err := proto.Unmarshal(v, p); err != nil {
			return nil, fmt.Errorf("cluster: placement policy: %w", err)
		}
		s.Replication, s.Paused = p.Replication, p.Paused
	}
	if pb := b.Bucket(bucketPlaced); pb != nil {
		err := pb.ForEach(func(k, v []byte) error {
			pl := &rpc.PartitionPlacement{}
			if err := proto.Unmarshal(v, pl); err != nil {
				return fmt.Errorf("cluster: placement %x: %w", k, err)
			}
			s.Placements = append(s.Placements, pl) // big-endian keys: in order
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if err := loadShares(b, s); err != nil {
		return nil, err
	}
	if nb := b.Bucket(bucketNodes); nb != nil {
		err := nb.ForEach(func(k, v []byte) error {
			n := &rpc.ClusterNode{}
			if err := proto.Unmarshal(v, n); err != nil {
				return fmt.Errorf("cluster: node %x: %w", k, err)
			}
			s.Nodes = append(s.Nodes, n) // keys are big-endian ids: in order
			s.Index = max(s.Index, n.ChangedIndex)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// StateName is the name of a node state in the API (joining, active,
// draining, removed).
func StateName(s rpc.NodeState) string {
	switch s {
	case rpc.NodeState_NODE_STATE_JOINING:
		return "joining"
	case rpc.NodeState_NODE_STATE_ACTIVE:
		return "active"
	case rpc.NodeState_NODE_STATE_DRAINING:
		return "draining"
	case rpc.NodeState_NODE_STATE_REMOVED:
		return "removed"
	}
	return "unknown"
}
