// Package raftlog runs the Raft groups of one raftgate node on
// go.etcd.io/raft/v3: a bbolt-backed raft.Storage shared by all groups in
// one file (DataDir/raft.db), one group-commit write path, a batched gRPC
// transport with snapshot streaming, log compaction, leadership events and
// leader transfer. It knows nothing about what the entries mean: a
// StateMachine per group applies them to its own bbolt bucket.
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
// One writer goroutine per node owns every bbolt write transaction (but the
// one that creates a group in AddGroup). It takes
// everything the groups queued since its last commit and writes it in ONE
// transaction with ONE commit (fsync): that is the group commit. Each
// group's loop drains its whole inbox per iteration and steps all queued
// proposals as one MsgProp, so one Ready, and so one write, carries many
// entries.
//
// Raft runs with AsyncStorageWrites: a Ready's local writes arrive as
// MsgStorageAppend / MsgStorageApply messages whose responses raft must see
// only once the write is durable. This lets a group hand a write to the
// writer and keep stepping messages (and emit more Readys) while the fsync
// is in flight.
//
// # The order of one Ready
//
//  1. Send. Messages that promise nothing about local state (a leader's
//     MsgApp and heartbeats, vote requests, snapshots) go to the transport
//     at once, so a leader replicates in parallel with its own fsync (Raft
//     thesis §10.2.1, as etcd does). Its own log counts toward the quorum
//     only after step 4.
//  2. Persist and apply. The MsgStorageAppend (entries, HardState,
//     snapshot) and MsgStorageApply (committed entries) of the Ready become
//     one write request. In the writer's next transaction: a snapshot is
//     installed (state bucket replaced, StateMachine.Restore called), the
//     entries are appended (replacing any conflicting tail), the HardState
//     is written, then StateMachine.Apply runs on the committed entries that
//     carry data and the applied index and term are written beside the
//     state, then a due compaction deletes old entries. Once every request
//     of the transaction ran without error, each Apply's Acknowledge
//     function runs: the applied entries are committed, that is durable on
//     a quorum, so an answer that depends only on their own outcome may go
//     out while this node's transaction is still being fsynced (a crash
//     now replays them from the log to the same outcome: Apply is
//     deterministic). Then the transaction commits: one commit (bbolt's
//     fsyncs) makes all of it durable for every group in the batch, so a
//     state machine's state and its applied index can never disagree after
//     a crash.
//  3. Right after the commit, on the writer goroutine and before its next
//     transaction: each Apply's Reveal functions run (in log order), and
//     the responses raft attached to the append that are addressed to peers
//     (MsgAppResp, vote responses) are sent. A follower acknowledges an entry
//     or grants a vote only once it is on disk, which is what makes an
//     acknowledged entry survive the loss of any minority, and a vote
//     unforgettable.
//  4. Then, on the group's goroutine: the logStore learns the new entries
//     (only now may raft read them from Storage), raft's own
//     MsgStorageAppendResp is stepped (the leader's log now counts toward
//     the quorum), the applied index is published (Status, metrics,
//     Knobs.AfterApply), read barriers whose read index is now applied
//     return, and the MsgStorageApplyResp is stepped (raft's equivalent of
//     Advance; RawNode.Advance is not used in this mode).
//
// So a StateMachine observes: Apply inside the write transaction (effects
// in the bucket, invisible to readers until commit), Acknowledge before the
// commit, Reveal after it. Whatever a reader would look up through View or
// a ReadIndex barrier (which waits for the durable applied index) may be
// revealed only from Reveal. Apply, Restore-on-install, Acknowledge and
// Reveal all run on the node's writer goroutine, so one StateMachine never
// sees two calls at once (Restore at open runs on the AddGroup caller
// before the group starts); none of them may block, as the writer serves
// every group.
//
// A failing Apply stops only its group: the whole transaction is rolled
// back and run again without that group's request; every other state
// machine whose Apply already ran in the rolled-back transaction gets
// Restore first (in the new transaction), so its in-memory indexes match
// its bucket again before Apply sees the same entries a second time.
//
// A failing commit (a disk error such as ENOSPC) stops every write of the
// node: the writer refuses all later requests, so no group's log gets a
// hole behind the lost transaction and no peer hears of entries that are
// not on disk; every group stops as its next write is refused, and the
// node reports the failure (Node.Failed). On restart it resumes from the
// last commit that succeeded.
//
// # When the writer commits
//
// Requests come in three kinds (planBatch decides, writer.go):
//
//   - Urgent: everything that gates an answer (new entries, snapshots,
//     votes, terms, a leader's apply). A commit starts as soon as the
//     writer is free, except that right after a commit that appended a
//     leader's entries the writer lingers up to 0.5 ms for that leader's
//     apply (the followers' acknowledgements are usually in flight, their
//     fsync having run in parallel), so the apply rides the next commit
//     instead of queueing behind it.
//   - Lazy: a commit-index-only hard state. It rides with the next urgent
//     commit or goes after 5 ms.
//   - Deferred: a follower's apply (handleReady splits it from the Ready's
//     append) and log compactions. Nobody waits for them, so they stay out
//     of urgent commits until the oldest has waited 20 ms or their entries
//     reach 256 KiB; then all go in one commit. A group's deferred requests
//     go earlier when a later request of the same group must not overtake
//     them: an apply (the follower became leader) or a snapshot install.
//     Everything else a group queues (appends, hard states) writes other
//     keys than its applies and compactions, so the two may commit in
//     either order; raft hands out for apply only entries that are already
//     in the local log.
//
// Fewer, smaller commits matter: a bbolt commit costs two fdatasyncs (data
// pages, then the meta page) whose time and CPU grow with the pages
// written, and the three nodes of a small cluster often share one disk.
// Deferring followers' applies keeps their state pages (records, outbox,
// branch pages of the state buckets) out of the commits on every
// acknowledgement's path and writes them once for many entries.
//
// # Storage
//
// Groups live in one bbolt file; see layout.go for the buckets. A new
// group starts, on every replica alike, from an empty snapshot at index 1,
// term 1 whose ConfState lists the voters, so replicas agree without
// replicating configuration entries and elect at once (a lone voter
// campaigns immediately). The log's hot tail is cached in memory
// (Config.EntryCacheBytes per group) so replication reads no bbolt.
//
// A binary built with the raftgate_nosync tag opens bbolt without fsync,
// to measure what durability costs (docs/benchmarks.md, "The storage
// floor"); it loses acknowledged writes on power loss and warns at start.
//
// # Snapshots and compaction
//
// After Config.SnapshotEntries applied entries the log is compacted up to
// applied - SnapshotCatchUpEntries. No snapshot data is materialised: when
// raft needs to send one, the sender opens a bbolt read transaction, reads
// the applied index and term stored with the state and streams the state
// bucket (nested buckets, keys, sequences; see snapshot.go) in chunks on the
// Raft.Snapshot RPC. bbolt's MVCC gives a consistent view at that index.
// The receiver spools it to a file and installs it in a write transaction.
//
// # Leader balancing
//
// Off unless Config.LeaderBalanceTicks is set. Each group then has a
// preferred voter (PreferredLeader: the group id modulo the sorted voters),
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
// snapshot is reported with ReportSnapshot). Inbound messages addressed to
// another node, or from a node that is not a configured voter, are logged
// and dropped.
package raftlog
