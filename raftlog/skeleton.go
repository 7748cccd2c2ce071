package raftlog

// skeleton: these declarations fix the signatures of Node and Group. The
// raftlog implementation replaces this whole file; keep the signatures.

import (
	"context"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
)

// Node hosts this process's Raft groups, their shared bbolt file and write
// loop, and the gRPC transport to peers.
type Node struct{}

// DefaultConfig returns a Config with production defaults.
func DefaultConfig() Config { panic("skeleton") }

// Validate names the first bad field.
func (c Config) Validate() error { panic("skeleton") }

// Open opens (or creates) the node's storage. Call RegisterGRPC on the
// server that listens at Peers[NodeID], then AddGroup for every group.
func Open(cfg Config) (*Node, error) { panic("skeleton") }

// RegisterGRPC registers the Raft transport service on s.
func (n *Node) RegisterGRPC(s grpc.ServiceRegistrar) { panic("skeleton") }

// AddGroup starts group id with the given voters (used only to bootstrap a
// group that has no state on disk) and state machine. sm.Restore is called
// before AddGroup returns.
func (n *Node) AddGroup(id GroupID, voters []uint64, sm StateMachine) (*Group, error) {
	panic("skeleton")
}

// Group returns a started group, or nil.
func (n *Node) Group(id GroupID) *Group { panic("skeleton") }

// Watch calls fn for every leadership change of every group, and once at
// once for each group's current state. fn runs on group goroutines and must
// not block. cancel stops further calls.
func (n *Node) Watch(fn func(LeaderEvent)) (cancel func()) { panic("skeleton") }

// TransferAll moves the leadership of every group this node leads to
// another voter (graceful shutdown) and returns when none is led here or ctx
// ends.
func (n *Node) TransferAll(ctx context.Context) error { panic("skeleton") }

// Close stops every group, the transport and the write loop, and closes
// the bbolt file. Safe to call twice.
func (n *Node) Close() error { panic("skeleton") }

// Group is one Raft group on this node. Its methods are safe for
// concurrent use.
type Group struct{}

// ID returns the group's id.
func (g *Group) ID() GroupID { panic("skeleton") }

// Propose appends data to the log if this node leads the group, and returns
// where it was appended as soon as raft accepted it (not when it commits:
// the state machine sees it in Apply). Fails at once with *NotLeaderError,
// ErrProposalDropped or ErrStopped; never hangs past ctx.
func (g *Group) Propose(ctx context.Context, data []byte) (Proposal, error) { panic("skeleton") }

// ReadIndex is a linearizable read barrier: it returns nil once this node,
// still the leader, has applied everything committed before the call.
// Concurrent calls are batched into one raft ReadIndex round.
func (g *Group) ReadIndex(ctx context.Context) error { panic("skeleton") }

// View runs fn in a read transaction over the group's state bucket.
func (g *Group) View(fn func(b *bolt.Bucket) error) error { panic("skeleton") }

// Status returns the group's current state on this node.
func (g *Group) Status() Status { panic("skeleton") }

// TransferLeadership asks raft to hand leadership to voter to and returns
// when another node leads or ctx ends.
func (g *Group) TransferLeadership(ctx context.Context, to uint64) error { panic("skeleton") }
