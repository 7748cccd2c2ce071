// Package partition owns the partition processor: the command encoding of
// a partition's log, the deterministic state machine that applies it, the
// leader-side request tracker, attach waiters, the retention sweeper and
// the invoker that runs invocations. The metadata group's state machine,
// the service registry, is package registry; invocation ids and routing are
// package invocation.
//
// # Log and state
//
// Every entry of a partition's log is an rpc.CommandBatch (rpc.BatchVersion;
// other versions stop the group rather than diverge). Apply runs inside
// raftlog's write transaction and touches only the group's state bucket:
//
//	invocations      id → rpc.InvocationRecord (pending and completed)
//	results          completed_at ‖ id → rpc.InvocationResult  (package results)
//	(results are keyed by completed_at ‖ id, found through the record)
//	outbox           due ‖ id → attempts, service       (package outbox)
//	keys             service, key → rpc.KeyState         (keys.go)
//	keyqueue         service, key ‖ seq → id             (keys.go)
//
// Apply is deterministic: timestamps come from the commands (the proposer
// stamps them), nothing reads a clock, randomness or map order. Invoke of
// an existing id is a no-op that reports it (PreviouslyAccepted unless it
// is the same request id); Complete of a completed invocation is a no-op, so
// the first Complete in log order is the result. Cancel completes a pending
// invocation with status 409, failed=true, error "cancelled". Purge{before}
// drops results completed before `before`, walking the time index.
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
//     calls Log.Propose; the waiter learns the entry's term.
//  3. raftlog commits the entry and calls Apply in its write transaction;
//     Apply only collects effects (replies, completed results, outbox
//     changes).
//  4. After the transaction is fsynced, raftlog runs the returned function:
//     the reply goes to the waiter if, and only if, the entry's term is the
//     waiter's term; attach waiters of completed invocations wake; the
//     invoker learns which deliveries ended. Nothing is revealed before it
//     is durable.
//  5. Any loss of leadership (OnLeadership with another leader or term,
//     Close) fails every pending request and attach waiter at once with
//     rpc.ErrLostLeadership (ambiguous, retry-safe: Invoke de-duplicates by
//     id).
//
// Reads (Output, Attach, Status) are linearizable: served by the leader
// after Log.ReadIndex. Followers answer *rpc.NotLeaderError with the leader
// and term they know.
//
// # Leader-only work
//
// For each term this node leads, the processor runs the invoker (after a
// ReadIndex, so it starts from everything earlier leaders committed) and
// the retention sweeper; both stop the moment leadership is lost. The
// invoker pages through the outbox without removing anything, reserves due
// deliveries in memory (bounded per partition and per service), calls the
// service, and proposes Complete or AttemptFailed (Admit for a due delayed
// exclusive invocation); the reservation ends when that command applies. Delivery is at-least-once, the result exactly-once.
// See DESIGN.md for why.
package partition
