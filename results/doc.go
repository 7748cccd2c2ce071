// Package results owns a partition's completed results and the callers
// waiting for them.
//
// Stored results live in one sub-bucket of the partition's state bucket,
// written only while the state machine applies a command, keyed by
// (completion time, invocation id): storing a result appends near the end
// of the tree, and Purge{before, limit} drops expired results by walking a
// prefix, at most limit per command, on every replica at the same log
// position; Delete drops one (an operator's purge of an invocation).
// Callers keep each result's completion time beside its id to
// look it up. Nothing in this package reads a clock: completion times come
// from the commands.
//
// Waiters are in-memory only (attach long-polls on the leader). They are
// woken after a Complete is durable, dropped when their caller goes away, and
// all failed at once when the leader loses leadership.
package results
