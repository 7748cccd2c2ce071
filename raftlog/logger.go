package raftlog

import (
	"fmt"
	"strings"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3"
)

// raftLogger adapts a zerolog logger to raft.Logger so that each group's
// raft instance logs through its own child logger (never raft.SetLogger,
// which is process-global).
type raftLogger struct{ zl zerolog.Logger }

var _ raft.Logger = raftLogger{}

// newRaftLogger is group id's raft library logger: Config.Logger's child
// with component "raft" (raftlog's own messages say "raftlog"), at
// Config.RaftLogLevel when that is above Logger's level.
func newRaftLogger(cfg Config, id GroupID) raftLogger {
	zl := cfg.Logger.With().Str("component", "raft").Uint32("group", uint32(id)).Logger()
	if cfg.RaftLogLevel > zl.GetLevel() {
		zl = zl.Level(cfg.RaftLogLevel)
	}
	return raftLogger{zl}
}

func (l raftLogger) Debug(v ...any)                 { l.zl.Debug().Msg(fmt.Sprint(v...)) }
func (l raftLogger) Debugf(format string, v ...any) { l.zl.Debug().Msgf(format, v...) }
func (l raftLogger) Info(v ...any)                  { l.zl.Info().Msg(fmt.Sprint(v...)) }
func (l raftLogger) Infof(format string, v ...any) {
	if isRoutine(format) {
		l.zl.Debug().Msgf(format, v...)
		return
	}
	l.zl.Info().Msgf(format, v...)
}
func (l raftLogger) Warning(v ...any) { l.zl.Warn().Msg(fmt.Sprint(v...)) }
func (l raftLogger) Warningf(format string, v ...any) {
	l.zl.Warn().Msgf(format, v...)
}
func (l raftLogger) Error(v ...any)                 { l.zl.Error().Msg(fmt.Sprint(v...)) }
func (l raftLogger) Errorf(format string, v ...any) { l.zl.Error().Msgf(format, v...) }

// isRoutine: raft logs these at info level on the normal path of
// asynchronous storage writes (an append's acknowledgement that arrives
// after later writes already covered its entries); under load they would
// flood an info log, so they go out at debug level.
func isRoutine(format string) bool {
	return strings.HasPrefix(format, "entry at index %d missing from unstable log") ||
		strings.HasPrefix(format, "entry at index %d matched unstable snapshot")
}

// Fatal and Panic both panic: raft calls them on broken invariants, and a
// library must not exit the process.
func (l raftLogger) Fatal(v ...any) { l.Panic(v...) }
func (l raftLogger) Fatalf(format string, v ...any) {
	l.Panicf(format, v...)
}

func (l raftLogger) Panic(v ...any) {
	msg := fmt.Sprint(v...)
	l.zl.Error().Msg(msg)
	panic(msg)
}

func (l raftLogger) Panicf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.zl.Error().Msg(msg)
	panic(msg)
}
