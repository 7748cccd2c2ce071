// Package invocation defines invocation ids and request ids and routes an
// invocation to its partition. It is a leaf: it imports nothing of
// raftgate, so the ingress, its dispatch client, the CLI and the partition
// processor all share one definition.
//
// An ID is 24 bytes: an 8-byte partition key, then 16 id bytes. It prints
// as "inv_" followed by lowercase base32 (ParseID accepts only the one
// canonical spelling). Idempotent derives the id from service, handler and
// idempotency key, so every node computes the same id for a retry; Random
// puts the creation time after the partition key, so a partition's records
// (keyed by the bytes after the partition key first) arrive in ascending
// order. RandomIn is Random with the partition key drawn inside one
// partition's range (the ingress places new invocations on partitions its
// node leads).
//
// Every invocation of one key of a keyed service (a virtual object's key, a
// workflow's id) carries the partition key KeyedPartitionKey(service, key),
// so they all live in the partition that holds that key's queue:
// RandomKeyed, IdempotentKeyed and WorkflowRun (one id per workflow id, which
// is what makes a workflow run at most once) derive their ids so.
//
// Partition i of n owns the contiguous key range
// [(i-1)·2⁶⁴/n, i·2⁶⁴/n) (PartitionFor, KeyRange): a later split is a range
// change, not a re-hash. CheckOwner refuses an id addressed to a partition
// that does not own it.
package invocation
