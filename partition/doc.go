// Package partition owns the partition processor: the commands of a
// partition's log, the deterministic state machine that applies them, and
// the leader-only work around it (the request tracker, attach waiters, the
// retention sweeper and the invoker that runs invocations). Invocation ids
// and routing are package invocation; the metadata group's service
// registry is package registry; matching a request to its applied entry is
// package proposals.
//
// Its promise: an acknowledged invocation is never lost and its result is
// recorded once.
//
// # Log and state
//
// Every entry of a partition's log is an rpc.CommandBatch (rpc.BatchVersion;
// other versions stop the group rather than diverge). Apply runs inside
// raftlog's write transaction and touches only the group's state bucket:
//
//	invocations      recordKey(id) → rpc.InvocationRecord (pending and completed)
//	results          completed_at ‖ id → rpc.InvocationResult  (package results)
//	outbox           due ‖ id → attempts, service       (package outbox)
//	keys             service, key → rpc.KeyState         (keys.go)
//	keyqueue         service, key ‖ seq → id             (keys.go)
//	created          accepted_at ‖ id → service         (listing index, listing.go)
//	fences           service → metadata log index        (fence.go; created by the first fence)
//	paused           service ‖ 0 ‖ id → nil               (lifecycle.go)
//	operations…      bulk operations, their running ones and marks (bulk.go)
//	schedules        schedule id → rpc.ScheduleState      (schedules.go; created by the first schedule)
//	callbacks        due ‖ id → attempts                 (package outbox; created by the first callback)
//
// An outbox entry may carry a started mark (Start, flow.go): the delivery
// of a service under a concurrency limit is under way until the mark's
// time; whatever moves or removes the entry drops it.
//
// Apply is deterministic: timestamps come from the commands (the proposer
// stamps them), nothing reads a clock, randomness or map order. Invoke of
// an existing id is a no-op that reports it (PreviouslyAccepted unless it
// is the same request id); Complete of a completed invocation is a no-op, so
// the first Complete in log order is the result. Cancel completes a pending
// invocation with status 409, failed=true, error "cancelled". Purge{before,
// limit} drops the oldest results completed before `before`, at most limit
// of them (every one when limit is 0, as Purge entries written before the
// limit existed replay), walking the time index, with their records and
// listing index entries. The leader stamps an Invoke's proposal time and,
// for a delayed send (delay_ms), its not-before time from the same clock. A completed record keeps only
// the first RequestPreviewBytes of its request body.
//
// Operators' actions are commands too (lifecycle.go): Pause (the invoker's,
// when a retry policy with onMaxAttempts pause is exhausted) takes a
// pending invocation out of the outbox as PAUSED; Resume, Restart, Kill and
// PurgeInvocation act on one invocation and reply rpc.ErrConflict when its
// state does not allow it. Bulk{filter, action} records an operation that
// BulkSteps apply, a bounded chunk per entry, to exactly the invocations
// that matched at the Bulk's log position: any command that changes a
// record the walk has not reached lets the operation act on it first
// (bulk.go, touch); a record created while one runs is marked visited.
// A retention Purge also drops the operations finished before its time.
//
// FenceService{name, index} raises the service's fence; from then on an
// Invoke checked against an older registration (0 < service_registered_index
// < fence) is refused with rpc.ErrStaleRegistry and stores nothing, unless
// its id exists already (then it reports it, as above). The node that takes
// a registry change fences every partition before it answers (fence.go).
//
// Schedules (schedules.go): the leader's scheduler proposes
// ScheduleTick{from, fire, skipped, next}, computed from its clock by
// package schedule; Apply takes it only while the schedule's next tick is
// still from, applies the overlap policy from stored state and records the
// tick's run under invocation.ScheduledRun(schedule, tick), so a tick is one
// invocation whichever leaders propose it.
// A keyed target's run lives in its key's partition: the tick records it
// in the schedule with its id in that partition, and the leader's dispatch
// loop (scheduledispatch.go) appends it there through Config.Dispatch until
// accepted, then proposes ScheduleDispatched; the id keeps it one
// invocation however often it is appended. BackfillSchedule carries the
// ticks of a past range, listed by the leader; each starts under its own
// tick's id.
//
// Completion callbacks (callbacks.go): the Apply that completes an
// invocation with Invoke.callback_url (finish: Complete, Cancel) sets its
// record's callback PENDING and queues it, due at the completion. The
// leader's callback loop POSTs it signed and proposes CallbackAttempt;
// only that Apply reschedules it (retry_at), or ends it (DELIVERED,
// FAILED) and removes it, for an attempt above the recorded one. The
// result is never changed by it.
//
// Exclusive invocations of a keyed service (Invoke.exclusive: an object's
// exclusive handlers, a workflow's run) run one at a time per (service,
// key), in the order they enter the key: at their Invoke, or for a delayed
// send at the Admit the leader proposes once it is due. Only the key's
// running invocation is in the outbox; the others wait in keyqueue, and the
// apply that completes the running one puts the next in the outbox. See
// keys.go.
//
// # Order of events for one request (leader)
//
//  1. Append registers a waiter keyed by request id (a retry of a pending
//     request takes its reply over and proposes nothing), then queues the
//     command. Bounded: rpc.ErrOverloaded when MaxPending waiters exist.
//  2. The proposer loop drains the queue into one CommandBatch per entry and
//     calls Log.Propose; the waiter learns the entry's term. While its last
//     entry (Config.InFlightBatches) is unapplied, the next batch is held
//     and keeps filling until an apply catches up or InFlightWait (5 ms)
//     passes: under load, fewer and larger entries, since every entry
//     costs each replica a log record, messages and an apply; an idle
//     partition never waits.
//  3. raftlog commits the entry and calls Apply in its write transaction;
//     Apply only collects effects (replies, completed results, outbox
//     changes).
//  4. Acknowledge, which raftlog runs once every Apply of its batch
//     succeeded (the entry is committed: durable on a quorum of write-ahead
//     logs), before the state is checkpointed (the order Apply →
//     Acknowledge → Reveal → checkpoint is raftlog's, stated in
//     raftlog/api.go, Applied): the reply goes to the waiter if, and only
//     if, the entry's term is the waiter's term, so a reply from an old
//     leader's entry never answers a newer attempt, nor the reverse. A reply
//     depends only on its own command's outcome, and a crash before the
//     checkpoint replays the entry from the log to the same outcome.
//  5. Reveal, which raftlog runs right after the batch's Acknowledges,
//     before its next Apply: attach waiters of completed invocations wake,
//     the invoker learns which deliveries ended, the outbox depth moves. A
//     reader through View (results, records, the outbox) finds the same
//     state from then on, as it reads inside raftlog's open transaction.
//  6. Any loss of leadership (OnLeadership with another leader or term,
//     Close) fails every pending request and attach waiter at once with
//     rpc.ErrLostLeadership (ambiguous, retry-safe: Invoke de-duplicates by
//     id, so the ingress resends the same request id and invocation id).
//
// Reads (Output, Attach, Status, List) are linearizable: served by the leader
// after Log.ReadIndex, which waits until this node applied the read index
// (checkpointed or not), so a read after an acknowledgement finds what was
// acknowledged. Followers answer *rpc.NotLeaderError with the leader and
// term they know. Call (an append that waits for the result) needs no
// ReadIndex: its attach waiter is registered before the proposal, so a
// completion applied after its entry wakes it and one applied before shows
// in the append's reply (then, rarely, the stored result is read after a
// ReadIndex).
//
// # Leader-only work
//
// For each term this node leads, the processor runs the invoker (after a
// ReadIndex, so it starts from everything earlier leaders committed), the
// retention sweeper and the bulk loop (it proposes the BulkSteps of a
// running bulk operation, paced to at most half the apply time); all stop
// the moment leadership is lost.
//
//   - Never pop what was not delivered. The invoker pages through the
//     outbox without removing anything, reserves due deliveries in memory
//     (at most Invoker.Concurrency per partition and ServiceConcurrency per
//     service, and within the registered flow control, flow.go), calls the service and proposes Complete or AttemptFailed
//     (Admit for a due delayed exclusive invocation); the reservation ends
//     when that command applies. Backlog (backlog.go) counts a service's
//     deliveries from the outbox and those reservations. A scan starts after the deliveries an
//     earlier one found under way at the head of the queue; a delivery
//     queued before that point, or a reservation released without an
//     outcome, makes the next one read from there again (invoker.from).
//     A crash, a step-down
//     or a dropped proposal leaves the entry where it was, and the next
//     leader delivers it again. Delivery is at-least-once (a leader change
//     repeats the calls in flight), the result exactly-once: the first
//     Complete in the log wins.
//   - Retries are in the log. Each failed attempt is an AttemptFailed entry
//     with the attempt number and the next due time (backoff with jitter
//     computed by the proposer, not in Apply), so a new leader honours the
//     schedule and the attempt limit, and a stale report is ignored. The
//     policy is the handler's (outbox.Policy.ForHandler); when its attempts
//     since the last resume are exhausted the invoker proposes Pause or a
//     failed Complete (onMaxAttempts). Each delivery carries its attempt
//     number and an attempt id, term.sequence, unique per invocation.
//   - Retention is a command. The sweeper proposes Purge{now - Retention,
//     PurgeLimit} only when the oldest stored result has expired, and the
//     next one as soon as one that stopped at its limit applies; every
//     replica drops the same results at the same log position. "now" is
//     log time (sweeper.go, retentionClock): never ahead of the newest
//     timestamp in the state when the term began plus the time the leader
//     measured since, so a leader whose clock runs ahead purges nothing
//     early.
//
// # Cost of an Invoke
//
// The state machine is CPU- and fsync-bound per entry, so concurrent
// requests share entries (proposer loop batching). Records are keyed by the
// id's bytes after the partition key, then the partition key (recordKey):
// ids minted without an idempotency key carry their creation time right
// after the partition key (invocation.Random), so a new record lands on the
// last page of the records tree (idempotent ids are hashes and land
// anywhere). The outbox key is due ‖ id with the due time derived from the
// record, so there is no second index by id; results are keyed by
// completed_at ‖ id, found through the record, so a Complete rewrites a
// recent record's page and appends near the end of the results tree, and a
// purge walks a prefix of it. The service name is kept in the outbox value
// so a scan applies per-service limits from keys alone. The machine keeps
// the pending records it stored, as stored (recordcache.go: bounded, kept
// across commits, dropped on a rollback and Restore), so a send's Complete
// reads no record from bbolt. As these keys mostly arrive in order, the
// buckets fill a page past bbolt's default half before splitting it
// (recordsFill, createdFill; results and outbox set their own), so a page
// a split leaves behind is not left half empty.
//
// Known limit: a service saturated at its per-service limit with more than
// Invoker.ScanLimit due entries at the head of the queue delays other
// services' entries behind it until its backlog shrinks (head-of-line
// within one partition).
//
// Deliveries held by flow control do not hide what is behind them that
// way (flow.go, "The scan window"): a scan queues at most a few
// candidates per fairness group and passes over the group's later
// deliveries, which it cannot admit before them: from their keys alone
// once the leader has read them (it remembers their group), and without
// walking them when they lie in the skip run an earlier scan found
// (skiprun.go, a second cursor: it jumps the stretch, taking each group's
// next candidates from the ones it remembers, read and checked afresh).
// A cold key behind a hot key's held backlog of 10,000 is so seen at the
// next scan, and a scan over that backlog reads only its groups'
// candidates (as many as a scan could admit) and walks none of its keys.
// Known limit: past 8 × ScanLimit held deliveries a scan without a run
// (the first of a term, and one every IdleRecheck) does not see, the
// reach grows by up to that much per scan (flow.go). Both are
// leader-local soft state, dropped at each
// term (so a new leader reads what it needs from state again), and
// cannot exceed a limit: the candidates are read and the limits counted
// from state as before. The alternative, the group (and what flowOf
// needs) kept in each outbox value at Invoke, would let a scan skip
// without the leader's memory, but changes stored state on every replica
// for every service (its encoding, mixed versions during an upgrade, the
// accept path's writes), and would still walk every key of the backlog
// at every scan; the leader's memory costs one record read per held
// delivery per term.
//
// Pending requests, attach waiters and the proposal queue are bounded
// (rpc.ErrOverloaded); the invoker reads at most ScanLimit outbox entries
// (and walks at most 8 × ScanLimit keys, besides one jump over its skip
// run of at most 128 groups) per scan, whatever the backlog, and
// remembers the group of at most 8 × ScanLimit held deliveries.
package partition
