package schedule

import (
	"errors"
	"testing"
	"time"
)

func TestRepeatAccepted(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		repeat string
		from   string
		want   []string
	}{
		// Unanchored: aligned to the epoch, like every: 5m.
		{"R/PT5M", "2026-12-01T09:03:00Z", []string{"2026-12-01T09:05:00Z", "2026-12-01T09:10:00Z", "2026-12-01T09:15:00Z"}},
		// Anchored: from the start on, whatever the epoch.
		{"R/2026-12-01T00:00:07Z/PT10M", "2026-11-30T00:00:00Z", []string{"2026-12-01T00:00:07Z", "2026-12-01T00:10:07Z", "2026-12-01T00:20:07Z"}},
		{"R/2026-12-01T00:00:07Z/PT10M", "2026-12-01T00:10:07Z", []string{"2026-12-01T00:20:07Z", "2026-12-01T00:30:07Z", "2026-12-01T00:40:07Z"}},
		// A count: three ticks, then none.
		{"R3/2026-12-01T00:00:00+01:00/PT1H", "2026-01-01T00:00:00Z", []string{"2026-11-30T23:00:00Z", "2026-12-01T00:00:00Z", "2026-12-01T01:00:00Z"}},
		{"R1/2026-12-01T00:00:00Z/P1W", "2026-01-01T00:00:00Z", []string{"2026-12-01T00:00:00Z"}},
		{"R/P1DT12H", "2026-12-01T11:00:00Z", []string{"2026-12-01T12:00:00Z", "2026-12-03T00:00:00Z", "2026-12-04T12:00:00Z"}},
	}
	for _, c := range cases {
		s := mustParse(t, Spec{Repeat: c.repeat})
		var got []string
		for tick := s.Next(utc(c.from)); !tick.IsZero() && len(got) < 3; tick = s.Next(tick) {
			got = append(got, tick.UTC().Format(time.RFC3339))
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s from %s: %v, want %v", c.repeat, c.from, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%s from %s: %v, want %v", c.repeat, c.from, got, c.want)
			}
		}
	}
}

func TestRepeatRefused(t *testing.T) {
	for _, r := range []string{
		"PT5M",                          // no R
		"R",                             // no duration
		"R/",                            // empty duration
		"R/5m",                          // a Go duration
		"R/PT0S",                        // zero
		"R/PT0.5S",                      // under a second
		"R/-PT5M",                       // negative
		"R/P1M",                         // a month has no fixed length
		"R/P1Y",                         // nor a year
		"R5/PT5M",                       // a count without a start
		"R0/2026-12-01T00:00:00Z/PT1H",  // no tick
		"R-1/2026-12-01T00:00:00Z/PT1H", // negative count
		"R+2/2026-12-01T00:00:00Z/PT1H", // signed count
		"Rx/2026-12-01T00:00:00Z/PT1H",  // not a count
		"R/2026-12-01/PT1H",             // a date without a time
		"R/2026-12-01T00:00:00/PT1H",    // no offset
		"R/PT1H/2026-12-01T00:00:00Z",   // duration/end
		"R/2026-12-01T00:00:00Z/2026-12-02T00:00:00Z", // start/end
		"R/2026-12-01T00:00:00Z/PT1H/PT1H",            // four parts
		"R/P1H",                                       // hours outside the time part
	} {
		if _, err := Parse(Spec{Repeat: r}); !errors.Is(err, ErrSpec) {
			t.Errorf("%q: %v, want ErrSpec", r, err)
		}
	}
	if _, err := Parse(Spec{Repeat: "R/PT5M", Every: time.Minute}); !errors.Is(err, ErrSpec) {
		t.Errorf("repeat with every: %v, want ErrSpec", err)
	}
	if _, err := Parse(Spec{Repeat: "R/PT5M", TimeZone: "Europe/Paris"}); !errors.Is(err, ErrSpec) {
		t.Errorf("repeat with a time zone: %v, want ErrSpec", err)
	}
}
