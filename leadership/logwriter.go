package leadership

import (
	"bytes"
	"net"

	"github.com/rs/zerolog"
)

// memberlistLog adapts memberlist's *log.Logger output ("[WARN] memberlist:
// text") to zerolog, keeping the level.
type memberlistLog struct {
	log zerolog.Logger
	// closing is closed when Close begins. memberlist's Shutdown closes
	// its sockets before it stops its gossip ticker, so a gossip round in
	// between fails on a closed socket and logs [ERR]: expected then, such
	// a line is logged at debug level.
	closing <-chan struct{}
}

var errClosedText = []byte(net.ErrClosed.Error())

var memberlistLevels = []struct {
	prefix []byte
	level  zerolog.Level
}{
	{[]byte("[DEBUG]"), zerolog.DebugLevel},
	{[]byte("[INFO]"), zerolog.InfoLevel},
	{[]byte("[WARN]"), zerolog.WarnLevel},
	{[]byte("[ERR]"), zerolog.ErrorLevel},
	{[]byte("[ERROR]"), zerolog.ErrorLevel},
}

func (w memberlistLog) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := zerolog.InfoLevel
	for _, l := range memberlistLevels {
		if rest, ok := bytes.CutPrefix(line, l.prefix); ok {
			level, line = l.level, bytes.TrimSpace(rest)
			break
		}
	}
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	if level > zerolog.DebugLevel && bytes.Contains(line, errClosedText) && w.isClosing() {
		level = zerolog.DebugLevel
	}
	w.log.WithLevel(level).Msg(string(line))
	return len(p), nil
}

func (w memberlistLog) isClosing() bool {
	select {
	case <-w.closing:
		return true
	default:
		return false
	}
}
