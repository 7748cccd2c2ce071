package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLogDurations: the console shows durations with their unit; JSON
// keeps them as numbers of milliseconds, whichever logger was built before.
func TestLogDurations(t *testing.T) {
	const took = 4276 * time.Millisecond
	var console bytes.Buffer
	log, err := newLogger(&console, "console", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("took", took).Dur("grace", 10*time.Second).Msg("stopped")
	// Not a terminal: no colour codes.
	if strings.Contains(console.String(), "\x1b[") {
		t.Errorf("colour codes written to a buffer: %q", console.String())
	}
	for _, want := range []string{"took=4.276s", "grace=10s"} {
		if !strings.Contains(console.String(), want) {
			t.Errorf("console line %q lacks %q", console.String(), want)
		}
	}

	var jsonOut bytes.Buffer
	if log, err = newLogger(&jsonOut, "json", "info"); err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("took", took).Msg("stopped")
	var line struct{ Took any }
	if err := json.Unmarshal(jsonOut.Bytes(), &line); err != nil {
		t.Fatalf("%q: %v", jsonOut.String(), err)
	}
	if line.Took != float64(4276) {
		t.Errorf("JSON took = %#v, want the number of milliseconds 4276 (line %q)", line.Took, jsonOut.String())
	}
}
