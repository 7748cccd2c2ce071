//go:build !raftgate_nosync

package raftlog

// noSync is true only in a binary built with the raftgate_nosync tag
// (fsync_off.go).
const noSync = false
