package server

import (
	"strconv"
	"strings"

	"github.com/rs/zerolog"
)

// raftChatterHook drops the info-level messages of the raft library itself
// (elections, votes, configuration), which raftlog logs through the
// logger it is given, one group after another: about fifty lines for a
// one-node start. `raftgate dev` installs it unless its --log-level is
// debug or trace, where they show. raftlog's own messages and raft's
// warnings and errors pass.
//
// raft's messages are recognised by their text: raft names the node by
// its id in hex at the start of nearly every message; its two others start
// with "newRaft " and "raft.node: ". raftlog's messages are constant
// sentences that start otherwise.
type raftChatterHook struct {
	selfPrefix string // the node id in hex and a space
}

func newRaftChatterHook(nodeID uint64) raftChatterHook {
	return raftChatterHook{selfPrefix: strconv.FormatUint(nodeID, 16) + " "}
}

func (h raftChatterHook) Run(e *zerolog.Event, level zerolog.Level, msg string) {
	if level == zerolog.InfoLevel && h.isRaft(msg) {
		e.Discard()
	}
}

func (h raftChatterHook) isRaft(msg string) bool {
	return strings.HasPrefix(msg, h.selfPrefix) || strings.HasPrefix(msg, "newRaft ") || strings.HasPrefix(msg, "raft.node: ")
}
