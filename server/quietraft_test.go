package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestRaftChatterHook(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf).Hook(newRaftChatterHook(26))
	log.Info().Msg("1a became leader at term 2")
	log.Info().Msg("newRaft 1a [peers: [1a]]")
	log.Info().Msg("raft.node: 1a elected leader 1a at term 2")
	log.Info().Msg("raft leadership")
	log.Warn().Msg("1a stepped down to follower since quorum is not active")
	got := buf.String()
	if strings.Contains(got, "became leader") || strings.Contains(got, "newRaft") || strings.Contains(got, "elected") {
		t.Errorf("raft's info chatter passed:\n%s", got)
	}
	if !strings.Contains(got, "raft leadership") || !strings.Contains(got, "stepped down") {
		t.Errorf("raftlog's message or raft's warning was dropped:\n%s", got)
	}
}
