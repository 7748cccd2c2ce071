// Package raftlog runs the Raft groups of one raftgate node on
// go.etcd.io/raft/v3: every group's Raft log in one write-ahead log
// (raftlog/wal) with group commit, state machines in one bbolt file
// (state.db) checkpointed off the acknowledgement path, a batched gRPC
// transport with snapshot streaming, log compaction, leadership events and
// leader transfer. It knows nothing about what the entries mean: a
// StateMachine per group applies them to its own bbolt bucket. It imports
// nothing of raftgate but its own subpackages: the transport's wire format
// is raftlog/raftlogpb.
//
// # Goroutines
//
// Each group has one goroutine (Group.run) that owns its raft.RawNode and
// its logStore; nothing else touches them, so there is no lock on raft
// state. Callers reach it through an inbox (proposals, read barriers,
// control closures, received messages, ticks, finished writes), each item
// carrying its reply channel. A goroutine per group, rather than one for
// all, keeps a slow group (a large snapshot install, a long Apply) from
// stalling the others, and costs little: groups are few (partitions + 1).
//
// Each node has two write paths, one goroutine each, shared by all its
// groups:
//
//   - the log writer (logwriter.go) appends the Raft output of every group
//     (entries, hard states, snapshot points) to the node's write-ahead log
//     (package raftlog/wal): everything queued since its last write goes in
//     ONE write and, when raft.MustSync says any of it must be durable, ONE
//     fdatasync: that is the group commit;
//   - the state applier (applier.go) applies committed entries of every
//     group to its bbolt bucket in state.db, inside one write transaction
//     that it keeps open across batches and commits (a checkpoint) every
//     Config.CheckpointInterval or CheckpointEntries, off every
//     acknowledgement's path.
//
// Each group's loop drains its whole inbox per iteration and steps all
// queued proposals as one MsgProp, so one Ready, and so one write, carries
// many entries. Raft runs with AsyncStorageWrites: a Ready's local writes
// arrive as MsgStorageAppend / MsgStorageApply messages whose responses
// raft must see only once the write is done, so a group keeps stepping
// messages (and emits more Readys) while an fdatasync is in flight.
//
// # The order of one Ready
//
//  1. Send. Messages that promise nothing about local state (a leader's
//     MsgApp and heartbeats, vote requests, snapshots) go to the transport
//     at once, so a leader replicates in parallel with its own fdatasync
//     (Raft thesis §10.2.1, as etcd does). Its own log counts toward the
//     quorum only after step 3.
//  2. Persist. The MsgStorageAppend (entries, HardState, snapshot point)
//     goes to the log writer. If it carries a snapshot, its state is first
//     installed and checkpointed by the applier (the group waits), so the
//     log never starts after a state that is not on disk. The applier
//     loads it into the group's staging bucket in steps of about 8 MiB,
//     each checkpointed on its own, other groups' work running between
//     them, then moves it in place of the state in one last step (with
//     StateMachine.Restore); a staging bucket a crash left is dropped when
//     the group opens.
//  3. Acknowledge. After the write and fdatasync that cover it, the log
//     writer sends the responses raft attached that are addressed to peers
//     (MsgAppResp, vote responses): a follower acknowledges an entry or
//     grants a vote only once it is on disk, which is what makes an
//     acknowledged entry survive the loss of any minority, and a vote
//     unforgettable. Then, on the group's goroutine, raft's own
//     MsgStorageAppendResp is stepped (the leader's log now counts toward
//     the quorum). A write that needs no fdatasync (a commit-index-only
//     hard state) promises nothing and is released after its write.
//  4. Apply. The MsgStorageApply (committed entries, which raft hands out
//     only once they are durable in this node's log) goes to the applier.
//     In its next batch, with requests of every group in queue order (one
//     rule for leaders and followers alike): StateMachine.Apply runs inside
//     the open transaction and the applied index and term are written
//     beside the state; once every Apply of the batch succeeded, each
//     Acknowledge runs (the entries are committed on a quorum of logs, so
//     an answer that depends only on their own outcome may go out: a crash
//     now replays them from the log to the same outcome, Apply being
//     deterministic), then each Reveal (readers, who read inside the same
//     transaction, see the effects now).
//  5. Advance. On the group's goroutine: the applied index is published
//     (Status, metrics, Knobs.AfterApply), read barriers whose read index
//     is now applied return, and the MsgStorageApplyResp is stepped
//     (raft's equivalent of Advance; RawNode.Advance is not used in this
//     mode).
//  6. Checkpoint. When checkpointDue says so, the applier commits its
//     transaction (bbolt's fsyncs) and tells each group the applied index
//     now durable in state.db; only up to there may a group compact its
//     log and the write-ahead log release its entries.
//
// So a StateMachine observes: Apply inside the applier's transaction,
// Acknowledge and Reveal after the batch, all on the applier goroutine, so
// one StateMachine never sees two calls at once (Restore at open runs on
// the AddGroup caller before the group starts); none of them may block, as
// the applier serves every group. Short readers (Group.View, StateDigest)
// are served by the applier inside its open transaction, so a read that
// follows an acknowledgement, or a ReadIndex, sees everything applied,
// checkpointed or not; every group's applies wait while one runs. Long
// readers use Group.ViewCheckpoint: the applier checkpoints what it applied
// (one commit at most), then the read runs in a bbolt read transaction of
// its own beside the applier, seeing everything applied before the call.
// Snapshots to followers and backups read the last checkpoint in a bbolt
// read transaction too (Backup checkpoints first). The large initial mmap
// (openStateDB) keeps a long read transaction from blocking a remap.
//
// A failing Apply, snapshot install, log write or checkpoint (a bug, a
// damaged state file, a disk error such as ENOSPC) stops every write of the
// node. A failing Apply rolls the open transaction back (it may hold part
// of what failed); its Applied functions and those of the rest of its batch
// do not run. The failed writer refuses all later requests, so no group's
// log gets a hole behind the lost write and no peer hears of entries that
// are not on disk; the groups that applied since the last checkpoint stop
// at once, the others as their next request is refused, and the node
// reports the failure (Node.Failed): the process should exit. On restart
// each group loads its state at its checkpointed applied index and raft
// replays the log past it; nothing acknowledged is lost, as it is in the
// write-ahead log. There is one policy, not a contained failure per group:
// an Apply is deterministic, so its error would recur on every replica and
// at every restart until the bug is fixed, and keeping the other groups
// running would take a journal of every apply since the checkpoint, a
// replay after each rollback and a Restore contract for it, for a node
// that has to be looked at anyway.
//
// # Storage
//
// See layout.go for the data dir: wal/ (the Raft log of every group) and
// state.db (the state machines). A new group starts, on every replica
// alike, from an empty snapshot at index 1, term 1 whose ConfState lists
// the voters, so replicas agree without replicating configuration entries
// and elect at once (a lone voter campaigns immediately). A replica that
// joins a running group (JoinGroup) starts blank, with no configuration,
// and gets one with its first snapshot. At open, a
// group's log is reconciled with its checkpointed state (Node.openLog). A
// data dir of the first release (format 1, the log inside raft.db) is
// migrated at the first start (migrate.go).
//
// Groups come and go while the node runs. AddGroup creates a group's
// buckets in a checkpointed update. RemoveGroup (remove.go) stops the
// group, then deletes its buckets and leaves a tombstone in one
// checkpointed update, then drops its records from the write-ahead log
// (fdatasync'd), then clears the tombstone; Open finishes a removal a crash
// cut short (it drops every tombstoned group's log before any group is
// added), so a removed group's old entries never come back. An update runs
// in a transaction of its own, checkpointed at once (what was applied
// before it is checkpointed first), so a failing update undoes only itself
// and no later rollback can undo it. A replica removed and added again
// under the same configuration is an empty log its leader remembers as
// longer: it stops with ErrStaleLog, so re-adding one is for a
// configuration change that makes it a new member.
//
// # Configuration changes
//
// A replica's Raft id is ReplicaID(node, generation); generation 0 (the
// node id) for every bootstrapped replica, a higher one each time a node
// is added back (the caller allocates generations and never reuses one;
// AddLearner refuses a second replica of a node). Changes are ConfChangeV2
// entries, one step at a time (membership.go): AddLearner, Promote (enter
// a joint configuration), LeaveJoint, RemoveReplica, each called on the
// leader with the configuration the caller saw, done-already being
// success; the expected configuration travels in the entry's Context and
// the applier refuses the change if another came first. The applier
// computes the new ConfState, writes it with the applied index in the same
// transaction and forces a checkpoint; only then does the group's loop
// call RawNode.ApplyConfChange and check both agree. So a crash loses the
// change and the applied index together or neither, a restart replays it
// from the log, and a snapshot (the last checkpoint) never carries a
// configuration older than the one applied. Knobs.AtConfChange names a
// failpoint before, in and after each step.
//
// A replica that applies its own removal, whose messages a member refuses
// as those of a removed replica (see Transport), or that receives a
// message for a newer replica of its node (a configuration holds one
// replica per node), stops its group with ErrRemoved and closes
// Group.Removed; that is not a node failure.
//
// A binary built with the raftgate_nosync tag skips every fsync (state.db
// and the write-ahead log), to measure what durability costs
// (docs/benchmarks.md); it loses acknowledged writes on power loss and
// warns at start.
//
// # Snapshots and compaction
//
// After Config.SnapshotEntries applied entries the log is compacted up to
// min(applied - SnapshotCatchUpEntries, checkpoint); a group that rarely
// reaches that count compacts to its checkpoint after compactAge, so it
// does not keep old segments alive. No snapshot data is materialised: when
// raft needs to send one, the sender opens a bbolt read transaction (the
// last checkpoint, never behind the compaction point), reads the applied
// index and term stored with the state and streams the state bucket
// (nested buckets, keys, sequences; see snapshot.go) in chunks on the
// Raft.Snapshot RPC. The receiver spools it to a file and the applier
// installs it. Streams are bounded (snapshotlimit.go): one to a peer at a
// time, at most Config.SnapshotStreams sent and as many received at once
// by a node; over a bound the send is not started, or the receiver
// refuses it, and raft, told SnapshotFailure, sends it again later.
//
// # Leader balancing
//
// Off unless Config.LeaderBalanceTicks is set. Each group then has a
// preferred voter (PreferredLeader: the group id modulo the sorted voters,
// recomputed when the configuration changes; none while it is joint),
// and a leader that has led for that many ticks hands the group to it with
// raft's leader transfer, provided it is another node that is recently
// active and replicating. Each group's goroutine decides alone, from its
// own raft state; nodes do not coordinate. A hand-off that does not hold
// backs off exponentially (balance.go).
//
// # Transport
//
// One Raft.Send stream per peer carries batches of messages of all groups;
// it reconnects with exponential backoff (50 ms to 1 s, jittered). Queues
// are bounded (Config.PeerQueueMessages): beyond them, and while a peer is
// down, messages are dropped and raft is told (ReportUnreachable; a failed
// snapshot is reported with ReportSnapshot). The peers are an address book
// that changes at run time (SetPeer, RemovePeer); messages go to the node
// of their replica id. Inbound messages addressed to another node or
// replica, or from a node not in the address book, or from a replica that
// is not a member of the group's applied configuration (voters, learners,
// both halves of a joint one; a blank replica hears any peer), are logged
// and dropped, except those of a replica the group removed (an older
// generation of a member's node) or of a node RemovePeer dropped: the
// stream ends with codes.FailedPrecondition and a "raftlog-removed"
// trailer listing group/replica, and the sender's node stops those
// groups.
//
// Tests swap the transport for a MemNetwork (Knobs.Network): nodes of one
// process exchange marshalled messages in memory, with seeded faults (cut
// links, drops, delays), an interceptor and forged messages. With
// Knobs.ManualTicks the test drives Raft time (Node.Tick). The package
// raftlog/raftlogtest builds whole clusters on both for the tests of the
// state machines above raftlog, so that they run under the applier's real
// order (Apply, Acknowledge, Reveal, checkpoint).
//
// Runs that replay exactly (step.go): with Knobs.Stepped a node starts no
// goroutine; each of its goroutines' turns (a group's loop turn, a log
// write, an applier batch) becomes a piece of work that the test runs, one
// at a time, from one goroutine (Node.Pending, Node.RunWork), with a
// stepped MemNetwork whose messages it delivers or drops itself, ticks it
// gives, and a virtual clock (Knobs.Now). TestSteppedRunReplays draws the
// whole schedule from a seed and runs it twice: the two traces must match
// line for line. Elections come from Group.Campaign, as etcd raft draws
// election timeouts from crypto/rand.
package raftlog
