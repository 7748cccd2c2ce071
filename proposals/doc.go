// Package proposals matches a proposed request to the reply its log entry
// produces when it applies. Partition processors and the service registry
// share it; it knows nothing of what the commands mean.
//
// A Tracker holds the leader's pending requests, keyed by request id, and
// the leadership they are valid for:
//
//  1. Register adds a waiter before the command is proposed (refused unless
//     this node leads; rpc.ErrOverloaded when full). Registering a request
//     id that is already pending takes its reply over: the old waiter fails
//     with rpc.ErrLostLeadership and nothing new needs proposing.
//  2. Proposed records the term Propose returned for the entry, or Fail
//     fails the waiters of a refused proposal.
//  3. Resolve hands the reply computed when the entry applied to the waiter
//     of the same request id, if and only if the entry's term is the term
//     the request was proposed in: a reply from an old leader's entry never
//     answers a newer attempt, nor the reverse. A reply that applies before
//     Proposed is kept until the term is known.
//  4. SetLeadership with another leader or term, and Close, fail every
//     pending waiter at once with rpc.ErrLostLeadership (ambiguous: the
//     entry may still commit, so callers retry the same request id).
//
// Every method is safe for concurrent use and never blocks: each waiter's
// channel is buffered and receives exactly one Reply.
package proposals
