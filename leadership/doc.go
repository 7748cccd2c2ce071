// Package leadership spreads cluster membership and the partition→leader
// table between nodes with hashicorp/memberlist.
//
// It owns:
//   - membership: each node advertises its NodeInfo (id and addresses) in
//     memberlist node metadata; Members reports every node seen, alive or
//     not, among Config.Voters (a node outside them is ignored, logged once);
//   - the leader table: partition → (leader, term), fed by this node's Raft
//     leadership events (SetLocal) and by NOT_LEADER answers (Hint), spread
//     by broadcasts (changes, within a few gossip intervals) and by push/pull
//     state exchange (full table, anti-entropy and joins).
//
// Entries merge by term (see merge.go): a lower term never overwrites a
// higher one. The table is a hint for routing: Raft decides who leads, and a
// caller corrects a stale entry from the NOT_LEADER answer it gets.
//
// Node metadata is capped at 512 bytes by memberlist, so only NodeInfo goes
// there; Config.Validate refuses a NodeInfo that does not fit.
//
// Listen binds the gossip sockets ahead of Start (Config.Listener), so that
// a node can fail on a port in use before it touches its storage.
package leadership
