package main

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
)

// newLogger builds the process logger: JSON lines (production) or
// human-readable console output (dev), at the given level.
func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("--log-level: %q is not one of trace, debug, info, warn, error", level)
	}
	switch format {
	case "json":
		return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
	case "console":
		out := zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
		return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format: %q is not json or console", format)
	}
}
