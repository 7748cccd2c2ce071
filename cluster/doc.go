// Package cluster is the cluster's membership record, kept in the metadata
// group beside the service registry: the cluster id (created once, at
// bootstrap or when a cluster of an earlier release is taken over), the
// node table (id, addresses, zone, state joining → active → draining →
// removed) and the next node id. Ids are given out by the cluster and never
// reused; a retried join (the same join nonce) gets the id it was given.
// Node states change only by compare-and-swap (SetNodeState names the
// state it expects), so two controllers, or a stale one, never both act.
//
// The record also holds the flow shares (shares.go): how each cluster-wide
// concurrency limit is split among the partitions, changed by
// compare-and-swap as PlanShares plans from the partitions' demand.
//
// Machine is the metadata group's raftlog.StateMachine: it routes each
// entry to the registry or to the cluster record. Cluster's commands are
// leader-only and answer once applied (package proposals), as the
// registry's do; State reads the applied record from memory.
//
// A node keeps its own identity (cluster id, node id, join nonce) in
// IdentityFile in its data dir, not in state.db: a backup of state.db
// restored on another node must not carry an identity with it.
//
// State beneath the metadata group's bucket:
//
//	cluster  "id"    → cluster id (16 bytes)
//	         "next"  → next node id (8 bytes big-endian)
//	         "nodes" → node id (8 bytes big-endian) → rpc.ClusterNode
//	         "placements" → partition (4 bytes big-endian) → rpc.PartitionPlacement
//	         "flowshares" → limit key → rpc.FlowShares (shares.go)
package cluster
