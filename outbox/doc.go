// Package outbox owns a partition's durable queue of deliveries: the
// invocations that still have to be run against their service.
//
// The queue lives in one sub-bucket of the partition's state bucket and is
// changed only by the partition state machine while it applies a command
// (Invoke adds, AttemptFailed reschedules, Complete removes; for a key of a
// keyed service only the invocation holding the key is queued here). The leader's
// invoker only reads it: it reserves entries in memory, delivers them, and
// proposes the command that removes or reschedules them. Nothing is popped
// before its outcome is in the log, so a crash or a leader change leaves every
// undelivered entry where it was (at-least-once delivery).
//
// Entries are keyed by due time (unix ms), then invocation id, so the
// invoker pages through what is due without loading the whole queue. There
// is no index by id: the caller keeps each entry's due time (in the
// invocation record) and passes it to Move and Remove, so every change
// touches keys near the queue's ends rather than random pages.
//
// Completion callbacks have a queue of their own (callbacks.go), keyed and
// changed the same way: the invocation's Complete (or Cancel) queues its
// callback, a CallbackAttempt reschedules or removes it.
//
// Policy holds the retry rules (exponential backoff with jitter, Retry-After,
// attempt limit, attempt timeout, pause or fail on exhausted attempts);
// Policy.For lays a service's registered rpc.RetryPolicy over the cluster's
// defaults, Policy.ForHandler a handler's over that. Classify maps a service's
// HTTP status to an outcome.
package outbox
