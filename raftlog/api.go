package raftlog

// This file holds raftlog's public types: partition, cmd and ingress code
// against them. Node and Group are in node.go and group.go.

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"

	"github.com/raftgate/raftgate/raftlog/wal"
)

// GroupID names a Raft group on a node. MetaGroup holds cluster metadata;
// partitions are 1..P.
type GroupID uint32

// MetaGroup is the cluster metadata group, replicated on every node.
const MetaGroup GroupID = 0

// Entry is one committed log entry handed to a StateMachine. Data is only
// valid during the Apply call.
type Entry struct {
	Index uint64
	// Term is the term of the leader that appended the entry; a proposer
	// matches its waiter to the entry by (Index, Term) or by Term plus an id
	// carried in Data.
	Term uint64
	Data []byte
}

// StateMachine is implemented by the partition processor and the metadata
// registry. Its methods are called one at a time, never concurrently, and
// in a happens-before order: Restore on the AddGroup caller's goroutine when
// the group opens; Apply, Restore (snapshot install) and the Applied
// functions on the node's applier goroutine, which serves every
// group (so none of them may block).
type StateMachine interface {
	// Apply applies committed entries that carry data, in log order, inside
	// the applier's state transaction. b is the group's state bucket; the
	// state machine keeps all its replicated state beneath it. raftlog
	// records the applied index in the same transaction, so state and
	// applied index become durable together at the next checkpoint. Apply
	// must be deterministic: no clock, no randomness, no local-only state,
	// no map-order effects: a restart replays the entries after the last
	// checkpoint, to the same state. An error is a bug or a damaged state
	// file: the applier rolls back its open transaction and stops, as after
	// a failed checkpoint, every group stops and the node reports the error
	// (Node.Failed); the process should exit.
	Apply(b *bolt.Bucket, entries []Entry) (Applied, error)

	// Restore is called when the group opens, and inside the transaction
	// that replaced the state bucket with a snapshot's content; the state
	// machine rebuilds its in-memory indexes from b. An Apply whose Applied
	// functions have not run yet may precede an install (they run after
	// it): b holds that Apply's outcome, or a later state.
	Restore(b *bolt.Bucket) error
}

// Applied is what one Apply hands back to raftlog: functions it runs later
// on the write goroutine, each at most once. Either may be nil; neither may
// block.
type Applied struct {
	// Acknowledge runs once every Apply of the applier's batch succeeded.
	// The entries are committed (durable on a quorum of write-ahead logs),
	// so an answer that depends only on the entries' own outcome may go out.
	Acknowledge func()
	// Reveal runs right after every Acknowledge of the batch, before the
	// next Apply: the effects are visible to View and ReadIndex readers
	// (they read inside the applier's transaction).
	Reveal func()
}

// Proposal says where a proposal was appended to the leader's log.
type Proposal struct {
	Index uint64
	Term  uint64
}

// LeaderEvent reports a change of a group's leader or term as this node
// sees it.
type LeaderEvent struct {
	Group  GroupID
	Leader uint64 // the leader's node, 0 when unknown
	Term   uint64
	IsSelf bool
}

// Status is a snapshot of a group's state on this node.
type Status struct {
	Group     GroupID
	Leader    uint64
	Term      uint64
	IsLeader  bool
	Applied   uint64
	Committed uint64
	// Voters are the nodes of the group's (incoming) voters.
	Voters []uint64
	// Match is each member's acknowledged log index by node; known on the
	// leader only.
	Match map[uint64]uint64
	// Active tells, on the leader only, whether it heard from each voter (by node)
	// within the last one to two election timeouts (itself: always). A
	// voter not heard from has a Match that may be long out of date.
	Active map[uint64]bool
	// Replica is this node's replica id in the group (ReplicaID).
	Replica uint64
	// Membership is the configuration applied on this replica, learners
	// and joint halves included, in replica ids.
	Membership Membership
}

var (
	// ErrProposalDropped: raft refused the proposal (for example a leader
	// transfer is under way or the uncommitted log is full). Nothing was
	// appended; retry is safe.
	ErrProposalDropped = errors.New("raftlog: proposal dropped")
	// ErrStopped: the node or group is closed.
	ErrStopped = errors.New("raftlog: stopped")
)

// NotLeaderError: this node does not lead the group. Nothing was appended.
type NotLeaderError struct {
	Group  GroupID
	Leader uint64 // 0 when unknown
	Term   uint64
}

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("raftlog: group %d: not leader (leader %d, term %d)", e.Group, e.Leader, e.Term)
}

// Config configures a Node. Zero fields take DefaultConfig's values.
type Config struct {
	// NodeID is this node's Raft id (non-zero).
	NodeID uint64
	// DataDir holds the node's write-ahead log (wal/) and state file
	// (state.db).
	DataDir string
	// DataDirLock is DataDir's lock when the caller took it (LockDataDir);
	// nil: Open takes it. Either way the Node releases it on Close.
	DataDirLock *DirLock
	// Peers maps node ids (this node's too) to the address the others
	// dial to reach it: the transport's address book at start, which
	// Node.SetPeer and Node.RemovePeer change while the node runs.
	Peers map[uint64]string
	// DialOptions for connections to peers (TLS credentials go here); when
	// empty, plaintext.
	DialOptions []grpc.DialOption

	// TickInterval is the length of one Raft tick.
	TickInterval time.Duration
	// ElectionTicks and HeartbeatTicks are counted in ticks.
	ElectionTicks  int
	HeartbeatTicks int
	// SnapshotEntries: compact a group's log once this many entries were
	// applied since the last snapshot.
	SnapshotEntries uint64
	// SnapshotCatchUpEntries: entries kept behind the applied index when
	// the log is compacted, so a follower that lags a little catches up
	// from the log instead of a snapshot.
	SnapshotCatchUpEntries uint64
	// SnapshotStreams bounds the snapshots a node streams at once, and
	// those it receives at once (one to each peer at most); see
	// snapshotlimit.go. Zero is DefaultSnapshotStreams.
	SnapshotStreams int
	// Raft flow control.
	MaxSizePerMsg             uint64
	MaxInflightMsgs           int
	MaxUncommittedEntriesSize uint64
	// IdleCompactAfter: a group that applied too few entries for the
	// SnapshotEntries rule compacts its log up to its checkpoint once this
	// long has passed since its last compaction, so that it does not keep
	// old write-ahead log segments alive.
	IdleCompactAfter time.Duration
	// CheckpointInterval and CheckpointEntries: the applier commits its
	// state transaction (a checkpoint) once this long has passed since the
	// last one with entries applied, or once this many entries were
	// applied. Checkpoints are off the acknowledgement path; they bound what
	// a restart replays from the log.
	CheckpointInterval time.Duration
	CheckpointEntries  int
	// WALSegmentBytes is the size of one write-ahead log segment file.
	WALSegmentBytes int64
	// PeerQueueMessages bounds the messages queued for one peer; beyond it
	// messages are dropped and raft is told the peer is unreachable.
	PeerQueueMessages int
	// LeaderBalanceTicks, when positive, turns on leader balancing: a
	// leader that has led a group this many ticks hands it to the group's
	// preferred voter (PreferredLeader) if that voter is another node,
	// recently active and replicating, so that leaderships spread over the
	// nodes instead of piling up on whichever won the first elections (see
	// balance.go). Zero leaves leadership where elections put it.
	// DefaultLeaderBalanceTicks is a sensible value.
	LeaderBalanceTicks int

	// Logger is the parent logger (the caller names the node in it); each
	// group gets a child. raftlog's messages carry component "raftlog",
	// the raft library's component "raft".
	Logger zerolog.Logger
	// RaftLogLevel is the least level of the raft library's messages that
	// is logged (its info level tells every election, vote and
	// configuration step of every group). Zero (debug) leaves it to
	// Logger's level.
	RaftLogLevel zerolog.Level
	// Registerer receives raftlog's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Knobs are optional testing hooks; nil in production.
	Knobs *Knobs
}

// Knobs are testing hooks at the durability boundaries (failpoints). Each
// may be nil.
type Knobs struct {
	// BeforeLogWrite runs before a log batch's write(2); AfterLogWrite
	// after it, before its fdatasync; AfterLogSync after the fdatasync,
	// before anything in the batch is acknowledged.
	BeforeLogWrite, AfterLogWrite, AfterLogSync func()
	// DuringCheckpoint runs when a state checkpoint has written its
	// transaction's changes in memory and is about to commit them.
	DuringCheckpoint func()
	// FailCommit, when it returns an error, makes a checkpoint fail with it
	// instead of committing (a disk error such as ENOSPC).
	FailCommit func() error
	// AfterRemoveState runs once RemoveGroup has durably deleted a group's
	// state, before it drops the group's log; AfterRemoveLog once the log
	// is dropped, before the tombstone goes. An error ends RemoveGroup
	// there, as a crash would.
	AfterRemoveState, AfterRemoveLog func() error
	// AtConfChange is the failpoint of each step of a configuration change
	// (membership.go), named point: "before-STEP" on the leader before it
	// proposes the change, "applied-STEP" in the applier once the new
	// configuration is written in its open transaction (an error fails the
	// checkpoint that would make it durable, as a crash there would: the
	// node writes nothing more), "after-STEP" on each replica once it is
	// checkpointed, before raft applies it (an error stops the group
	// there). STEP is add-learner, enter-joint, leave-joint or remove.
	AtConfChange func(group GroupID, point string) error
	// DuringSnapshotInstall runs when an installed snapshot's state is
	// written in the applier's open transaction, before the checkpoint
	// that makes it durable (a blank replica, such as a learner's, gets
	// its first state this way).
	DuringSnapshotInstall func(group GroupID)
	// AfterInstallStep runs on the group's goroutine once a step of a
	// snapshot's load into the staging bucket is checkpointed (an install
	// loads installStepBytes per step, InstallStepBytes when set), before
	// the next step or the swap.
	AfterInstallStep func(group GroupID)
	InstallStepBytes int
	// AfterApply runs after a group applied entries up to index.
	AfterApply func(group GroupID, index uint64)
	// ManualTicks: the node starts no ticker; the test advances Raft time
	// with Node.Tick.
	ManualTicks bool
	// LogFS is the write-ahead log's file layer (wal.CrashFS in power-loss
	// tests); nil is the operating system's.
	LogFS wal.FS
	// Network, when set, carries the node's Raft messages instead of gRPC
	// (Peers' addresses are then unused).
	Network *MemNetwork
	// Stepped: the node starts no goroutine of its own (no group loop,
	// log writer, applier or ticker). One test goroutine drives it with
	// Node.Step, one component at a time, so that a seeded schedule of
	// steps, messages (a stepped MemNetwork) and ticks replays exactly.
	// Blocking calls (AddGroup, Propose, View, Status) run the components
	// they wait for inline. Implies ManualTicks.
	Stepped bool
	// Now is the node's clock (checkpoint and compaction timing); nil is
	// the wall clock. A stepped test supplies a virtual one.
	Now func() time.Time
}

func (k *Knobs) stepped() bool { return k != nil && k.Stepped }

func (k *Knobs) now() time.Time {
	if k == nil || k.Now == nil {
		return time.Now()
	}
	return k.Now()
}

func (k *Knobs) walFS() wal.FS {
	if k == nil {
		return nil
	}
	return k.LogFS
}

func (k *Knobs) walKnobs() *wal.Knobs {
	if k == nil || (k.BeforeLogWrite == nil && k.AfterLogWrite == nil && k.AfterLogSync == nil) {
		return nil
	}
	return &wal.Knobs{BeforeWrite: k.BeforeLogWrite, AfterWrite: k.AfterLogWrite, AfterSync: k.AfterLogSync}
}
