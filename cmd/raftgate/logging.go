package main

import (
	"fmt"
	"io"

	"github.com/rs/zerolog"
)

// newLogger builds the process logger: JSON lines (production) or
// human-readable console output (dev), at the given level.
//
// Every line's time has millisecond resolution (logTimeFormat), and every
// duration (Dur) is written with its unit, in JSON as on the console: a Go
// duration string ("took":"4.276s", took=4.276s). zerolog renders both by
// process-wide settings, set here: a process builds its logger before it
// logs.
func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("--log-level: %q is not one of trace, debug, info, warn, error", level)
	}
	setLogFormats()
	switch format {
	case "json":
		return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
	case "console":
		// Colours only on a terminal: not in files, pipes or journald.
		out := zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
		return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format: %q is not json or console", format)
	}
}

// logTimeFormat is RFC 3339 with milliseconds.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// setLogFormats writes zerolog's globals only when they differ, so that
// in-process tests building loggers again do not write them under
// goroutines logging meanwhile.
func setLogFormats() {
	if zerolog.TimeFieldFormat != logTimeFormat {
		zerolog.TimeFieldFormat = logTimeFormat
	}
	if zerolog.DurationFieldFormat != zerolog.DurationFormatString {
		zerolog.DurationFieldFormat = zerolog.DurationFormatString
	}
}
