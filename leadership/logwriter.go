package leadership

import (
	"bytes"

	"github.com/rs/zerolog"
)

// memberlistLog adapts memberlist's *log.Logger output ("[WARN] memberlist:
// text") to zerolog, keeping the level.
type memberlistLog struct {
	log zerolog.Logger
}

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
	w.log.WithLevel(level).Msg(string(line))
	return len(p), nil
}
