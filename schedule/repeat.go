package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sosodev/duration"
)

// repeat is a parsed ISO 8601 repeating interval.
type repeat struct {
	every time.Duration
	// anchor is the first tick; zero aligns the ticks to the Unix epoch.
	anchor time.Time
	// count is how many ticks there are (0: no end).
	count int64
}

// parseRepeat reads an ISO 8601 repeating interval of one of two forms:
// R[n]/START/DURATION (ticks at START, START+DURATION, …, n of them when
// n is given) and R/DURATION (ticks aligned to the Unix epoch, as for a Go
// duration). START is RFC 3339; DURATION is an ISO 8601 duration of
// fixed-length units (weeks, days of 24 hours, hours, minutes, seconds):
// years and months, negative durations, the forms with an end
// (R/START/END, R/DURATION/END) and a count without a start are refused.
func parseRepeat(s string) (repeat, error) {
	bad := func(why string) (repeat, error) {
		return repeat{}, fmt.Errorf("%w: repeating interval %q: %s (want R/PT5M or R5/2026-12-01T00:00:00Z/PT1H)", ErrSpec, s, why)
	}
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || !strings.HasPrefix(parts[0], "R") {
		return bad("not of the form R[n]/[START/]DURATION")
	}
	var r repeat
	if n := parts[0][1:]; n != "" {
		c, err := strconv.ParseInt(n, 10, 64)
		if err != nil || c < 1 || strings.HasPrefix(n, "+") {
			return bad("the count after R must be a whole number of at least 1")
		}
		if len(parts) == 2 {
			return bad("a count needs a start")
		}
		r.count = c
	}
	if len(parts) == 3 {
		t, err := time.Parse(time.RFC3339Nano, parts[1])
		if err != nil {
			return bad("the start must be an RFC 3339 time; an end instead of a duration is not supported")
		}
		r.anchor = t
	}
	d, err := duration.Parse(parts[len(parts)-1])
	switch {
	case err != nil:
		return bad("the last part must be an ISO 8601 duration like PT5M")
	case d.Negative:
		return bad("the duration must be positive")
	case d.Years != 0 || d.Months != 0:
		return bad("years and months have no fixed length: use a cron expression")
	}
	r.every = d.ToTimeDuration()
	return r, nil
}
