// Package wal is the write-ahead log of one raftgate node: the Raft logs
// (entries and hard states) of all its groups in one stream of segment
// files, one write and at most one fdatasync per batch.
//
// (The full manual — byte format, recovery rules, batch atomicity,
// concurrency and the deletion rule — follows in the next commit.)
package wal
