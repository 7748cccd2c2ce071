package duration

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0":          0,
		"10s":        10 * time.Second,
		"1h30m":      90 * time.Minute,
		"1.5s":       1500 * time.Millisecond,
		"500ms":      500 * time.Millisecond,
		"1000ms":     time.Second,
		"2us":        2 * time.Microsecond,
		"3µs":        3 * time.Microsecond,
		"7ns":        7,
		" 60 sec ":   time.Minute,
		"60sec":      time.Minute,
		"1h 30min":   90 * time.Minute,
		"2 days":     48 * time.Hour,
		"1w":         7 * 24 * time.Hour,
		"+5s":        5 * time.Second,
		"PT10S":      10 * time.Second,
		"pt10s":      10 * time.Second,
		"PT1H30M":    90 * time.Minute,
		"P1D":        24 * time.Hour,
		"P1W":        7 * 24 * time.Hour,
		"P1DT12H":    36 * time.Hour,
		"PT0.5S":     500 * time.Millisecond,
		"PT0,25S":    250 * time.Millisecond,
		"PT1M0.001S": time.Minute + time.Millisecond,
		"PT36H":      36 * time.Hour,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, wantErr := range map[string]error{
		"":                        ErrEmpty,
		"  ":                      ErrEmpty,
		"-1s":                     ErrNegative,
		"10":                      ErrSyntax,
		"s":                       ErrSyntax,
		"10 parsecs":              ErrSyntax,
		"1.s.":                    ErrSyntax,
		"P":                       ErrSyntax,
		"PT":                      ErrSyntax,
		"P1":                      ErrSyntax,
		"P1H":                     ErrSyntax, // H needs the T
		"PT1D":                    ErrSyntax,
		"PT1S1M":                  ErrSyntax, // out of order
		"PT1M1M":                  ErrSyntax,
		"P1DT":                    ErrSyntax,
		"P1Y":                     ErrAmbiguous,
		"P1M":                     ErrAmbiguous,
		"2 months":                ErrAmbiguous,
		"1M":                      ErrAmbiguous,
		"99999999999999999999h":   ErrOverflow,
		"P9999999999999999999W":   ErrOverflow,
		"3000000h":                ErrOverflow,
		"2562047h 1h":             ErrOverflow,
		"PT9223372036.854775808S": ErrOverflow,
	} {
		if _, err := Parse(in); !errors.Is(err, wantErr) {
			t.Errorf("Parse(%q) error = %v, want %v", in, err, wantErr)
		}
	}
}

// FuzzParse: never panics, never negative; Go durations parse to
// what time.ParseDuration says.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10s", "1h30m", "PT10S", "PT1H30M", "P1D", "P1W", "PT0.5S", "1000ms", "60 sec",
		"-1s", "P1M", "1.5h", "9223372036854775807ns", "P106751DT23H47M16.854775807S", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("Parse(%q) = %v < 0", s, d)
		}
		// Plain Go syntax (no spaces, no long units) must agree with the
		// standard library, up to float rounding of fractions.
		if !strings.ContainsAny(s, " Pp+,") && !strings.ContainsAny(s, "dwyM") {
			want, err := time.ParseDuration(s)
			if err == nil && !strings.Contains(s, ".") && want != d {
				t.Fatalf("Parse(%q) = %v, time.ParseDuration = %v", s, d, want)
			}
		}
	})
}
