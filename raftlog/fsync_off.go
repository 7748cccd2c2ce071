//go:build raftgate_nosync

package raftlog

// noSync turns off the fsyncs of state.db and of the write-ahead log
// (nosync.go). It exists to measure what fsync costs on a machine
// (docs/benchmarks.md): such a binary loses
// acknowledged writes on power loss or a kernel crash, so it must never run
// a real cluster, and every node says so loudly at start-up.
const noSync = true
