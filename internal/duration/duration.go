// Package duration parses the delay and timeout syntax of raftgate's
// ingress (Go durations, Restate's human-friendly forms and ISO-8601), so
// that the ingress and the command line read the same text the same way.
package duration

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Duration syntax errors (wrapped with the offending text).
var (
	ErrEmpty     = errors.New("empty duration")
	ErrNegative  = errors.New("negative duration")
	ErrOverflow  = errors.New("duration too large")
	ErrSyntax    = errors.New("invalid duration")
	ErrAmbiguous = errors.New("years and months have no fixed length; use days or weeks")
)

// Parse parses the delay and timeout syntax of the ingress:
//
//   - Go durations: "10s", "1h30m", "1.5s", "500ms", "0";
//   - the human-friendly forms Restate's ingress and its clients send:
//     "1000ms", "60 sec", "1h 30min", "2 days", "1w";
//   - ISO-8601 durations: "PT10S", "PT1H30M", "P1D", "P1W", "PT0.5S",
//     "P1DT12H" (case-insensitive; years and months are refused because
//     their length depends on the date).
//
// Negative durations are refused; the result never overflows.
func Parse(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, ErrEmpty
	}
	var (
		d   time.Duration
		err error
	)
	switch t[0] {
	case '-':
		return 0, fmt.Errorf("%w %q", ErrNegative, s)
	case '+':
		t = t[1:]
	}
	if len(t) > 0 && (t[0] == 'P' || t[0] == 'p') {
		d, err = parseISODuration(t[1:])
	} else {
		d, err = parseUnitDuration(t)
	}
	if err != nil {
		return 0, fmt.Errorf("%w %q", err, s)
	}
	return d, nil
}

// number is a decimal number as written: integer part and fraction digits.
type number struct {
	whole    uint64
	frac     uint64 // the fraction digits as an integer
	fracLen  int    // how many fraction digits were significant (<= 18)
	hasDigit bool
}

// scanNumber reads digits with an optional fraction from s[i:].
func scanNumber(s string, i int) (number, int, error) {
	var n number
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		if n.whole > (math.MaxUint64-9)/10 {
			return n, i, ErrOverflow
		}
		n.whole = n.whole*10 + uint64(s[i]-'0')
		n.hasDigit = true
		i++
	}
	if i < len(s) && (s[i] == '.' || s[i] == ',') { // ISO allows a decimal comma
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if n.fracLen < 18 {
				n.frac = n.frac*10 + uint64(s[i]-'0')
				n.fracLen++
			}
			n.hasDigit = true
			i++
		}
	}
	if !n.hasDigit {
		return n, i, ErrSyntax
	}
	return n, i, nil
}

// times returns n·unit, refusing overflow.
func (n number) times(unit time.Duration) (time.Duration, error) {
	if n.whole > uint64(math.MaxInt64/int64(unit)) {
		return 0, ErrOverflow
	}
	d := time.Duration(n.whole) * unit
	if n.fracLen > 0 {
		f := float64(n.frac) / math.Pow10(n.fracLen) * float64(unit)
		if float64(d)+f >= math.MaxInt64 {
			return 0, ErrOverflow
		}
		d += time.Duration(f)
	}
	return d, nil
}

// add returns a+b, refusing overflow (both are non-negative).
func add(a, b time.Duration) (time.Duration, error) {
	if a > math.MaxInt64-b {
		return 0, ErrOverflow
	}
	return a + b, nil
}

// parseISODuration parses what follows the P of an ISO-8601 duration:
// [nW][nD][T[nH][nM][nS]], each unit at most once and in order.
func parseISODuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, ErrSyntax
	}
	var total time.Duration
	inTime := false
	// rank orders the designators; each must come after the previous one.
	rank := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c == 'T' || c == 't' {
			if inTime || i == len(s)-1 {
				return 0, ErrSyntax
			}
			inTime = true
			i++
			continue
		}
		n, j, err := scanNumber(s, i)
		if err != nil {
			return 0, err
		}
		if j >= len(s) {
			return 0, ErrSyntax // number without designator
		}
		var unit time.Duration
		var r int
		switch des := s[j] | 0x20; { // lower case
		case !inTime && des == 'y', !inTime && des == 'm':
			return 0, ErrAmbiguous
		case !inTime && des == 'w':
			unit, r = 7*24*time.Hour, 1
		case !inTime && des == 'd':
			unit, r = 24*time.Hour, 2
		case inTime && des == 'h':
			unit, r = time.Hour, 3
		case inTime && des == 'm':
			unit, r = time.Minute, 4
		case inTime && des == 's':
			unit, r = time.Second, 5
		default:
			return 0, ErrSyntax
		}
		if r <= rank {
			return 0, ErrSyntax
		}
		rank = r
		d, err := n.times(unit)
		if err != nil {
			return 0, err
		}
		if total, err = add(total, d); err != nil {
			return 0, err
		}
		i = j + 1
	}
	if rank == 0 {
		return 0, ErrSyntax // "P" or "PT" alone
	}
	return total, nil
}

// parseUnitDuration parses a sequence of number+unit pairs, optionally
// separated by spaces: Go's syntax plus the longer unit names humantime
// (Restate's parser) accepts.
func parseUnitDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	var total time.Duration
	for i := 0; i < len(s); {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i == len(s) {
			break
		}
		n, j, err := scanNumber(s, i)
		if err != nil {
			return 0, err
		}
		for j < len(s) && s[j] == ' ' {
			j++
		}
		k := j
		for k < len(s) && s[k] != ' ' && (s[k] < '0' || s[k] > '9') && s[k] != '.' {
			k++
		}
		if k == j {
			return 0, fmt.Errorf("%w: missing unit (write e.g. 10s, 500ms or PT10S)", ErrSyntax)
		}
		unit, err := durationUnit(s[j:k])
		if err != nil {
			return 0, err
		}
		d, err := n.times(unit)
		if err != nil {
			return 0, err
		}
		if total, err = add(total, d); err != nil {
			return 0, err
		}
		i = k
	}
	return total, nil
}

// durationUnit maps a unit name to its length.
func durationUnit(u string) (time.Duration, error) {
	switch u {
	case "ns", "nsec", "nsecs", "nanos", "nanosecond", "nanoseconds":
		return time.Nanosecond, nil
	case "us", "µs", "μs", "usec", "usecs", "micros", "microsecond", "microseconds":
		return time.Microsecond, nil
	case "ms", "msec", "msecs", "millis", "millisecond", "milliseconds":
		return time.Millisecond, nil
	case "s", "sec", "secs", "second", "seconds":
		return time.Second, nil
	case "m", "min", "mins", "minute", "minutes":
		return time.Minute, nil
	case "h", "hr", "hrs", "hour", "hours":
		return time.Hour, nil
	case "d", "day", "days":
		return 24 * time.Hour, nil
	case "w", "week", "weeks":
		return 7 * 24 * time.Hour, nil
	case "M", "month", "months", "y", "year", "years":
		return 0, ErrAmbiguous
	}
	return 0, fmt.Errorf("%w: unknown unit %q (use ns, us, ms, s, m, h, d or w)", ErrSyntax, u)
}
