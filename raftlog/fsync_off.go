//go:build raftgate_nosync

package raftlog

// noSync turns off bbolt's fsyncs. It exists to measure what fsync costs on
// a machine (docs/benchmarks.md, "The storage floor"): such a binary loses
// acknowledged writes on power loss or a kernel crash, so it must never run
// a real cluster, and every node says so loudly at start-up.
const noSync = true
