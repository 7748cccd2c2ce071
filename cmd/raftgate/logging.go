package main

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
)

// newLogger builds the process logger: JSON lines (production) or
// human-readable console output (dev), at the given level.
//
// Duration fields (Dur) are numbers of milliseconds in JSON, what log
// pipelines parse ("took":4276), and Go durations on the console
// (took=4.276s). zerolog renders them by a process-wide setting, set here:
// a process builds one logger, before it logs.
func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("--log-level: %q is not one of trace, debug, info, warn, error", level)
	}
	switch format {
	case "json":
		setDurationFormat(zerolog.DurationFormatFloat)
		return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
	case "console":
		setDurationFormat(zerolog.DurationFormatString)
		// Colours only on a terminal: not in files, pipes or journald.
		out := zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)}
		return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format: %q is not json or console", format)
	}
}

// setDurationFormat writes zerolog's global only when it changes: a
// process sets it once, and in-process tests that build loggers of one
// format again do not write it under goroutines logging meanwhile.
func setDurationFormat(f string) {
	if zerolog.DurationFieldFormat != f {
		zerolog.DurationFieldFormat = f
	}
}
