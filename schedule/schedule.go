package schedule

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec is what a user gives: exactly one of Every and Cron.
type Spec struct {
	Every time.Duration
	// Cron is a five-field expression or a descriptor (@daily).
	Cron string
	// TimeZone is an IANA name (Europe/Paris) for Cron; empty is UTC.
	TimeZone string
}

// Schedule is a parsed Spec.
type Schedule struct {
	every time.Duration
	cron  *cron.SpecSchedule
}

// MinEvery is the shortest interval: ticks are placed in milliseconds and
// fired by a leader loop, so finer ones would mostly be skipped.
const MinEvery = time.Second

// ErrSpec is wrapped by every error Parse returns.
var ErrSpec = errors.New("invalid schedule spec")

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse checks spec and returns its Schedule.
func Parse(spec Spec) (*Schedule, error) {
	switch {
	case spec.Every != 0 && spec.Cron != "":
		return nil, fmt.Errorf("%w: give either an interval or a cron expression, not both", ErrSpec)
	case spec.Every != 0:
		if spec.TimeZone != "" {
			return nil, fmt.Errorf("%w: a time zone applies to a cron expression only", ErrSpec)
		}
		if spec.Every < MinEvery || spec.Every%time.Millisecond != 0 {
			return nil, fmt.Errorf("%w: interval %v: want at least %v, in whole milliseconds", ErrSpec, spec.Every, MinEvery)
		}
		return &Schedule{every: spec.Every}, nil
	case spec.Cron != "":
		if strings.Contains(spec.Cron, "TZ=") || strings.HasPrefix(strings.TrimSpace(spec.Cron), "@every") {
			return nil, fmt.Errorf("%w: cron %q: give the time zone in its own field and an interval as every", ErrSpec, spec.Cron)
		}
		loc, err := time.LoadLocation(spec.TimeZone)
		if err != nil || spec.TimeZone == "Local" {
			return nil, fmt.Errorf("%w: unknown time zone %q", ErrSpec, spec.TimeZone)
		}
		s, err := parser.Parse(spec.Cron)
		if err != nil {
			return nil, fmt.Errorf("%w: cron %q: %v", ErrSpec, spec.Cron, err)
		}
		ss, ok := s.(*cron.SpecSchedule)
		if !ok {
			return nil, fmt.Errorf("%w: cron %q is not a calendar expression", ErrSpec, spec.Cron)
		}
		ss.Location = loc
		return &Schedule{cron: ss}, nil
	}
	return nil, fmt.Errorf("%w: give an interval (every) or a cron expression", ErrSpec)
}

// Next returns the first tick strictly after t, or the zero time when there
// is none (a cron expression that never matches).
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		ms, every := t.UnixMilli(), s.every.Milliseconds()
		next := ms - ms%every + every
		if ms < 0 && ms%every != 0 {
			next -= every
		}
		return time.UnixMilli(next)
	}
	n := s.cron.Next(t)
	if !n.IsZero() && repeated(n, s.cron.Location) {
		n = s.cron.Next(n)
	}
	if n.IsZero() {
		return n
	}
	return time.UnixMilli(n.UnixMilli())
}

// repeated says whether t is the second occurrence of its wall-clock
// time in loc, in the hour a daylight-saving change repeats (robfig/cron
// fires both; cron fires once).
func repeated(t time.Time, loc *time.Location) bool {
	t = t.In(loc)
	_, off := t.Zone()
	for _, shift := range []time.Duration{30 * time.Minute, time.Hour} {
		e := t.Add(-shift)
		if _, eoff := e.Zone(); eoff != off && e.Hour() == t.Hour() && e.Minute() == t.Minute() {
			return true
		}
	}
	return false
}

// Plan is what a leader proposes for a schedule whose next tick is due.
type Plan struct {
	// Fire is the tick to run now; zero when every due tick was skipped.
	Fire time.Time
	// Skipped counts the ticks dropped because they were due longer ago
	// than the catch-up window.
	Skipped uint64
	// Next is the tick after the last one Fire or Skipped accounts for.
	Next time.Time
}

// maxSkipScan bounds how many overdue ticks Catchup walks one at a time
// (a minutely cron over a year of downtime); past it the count is an
// estimate and the walk jumps to the window.
const maxSkipScan = 1 << 20

// Catchup decides what to do at now about ticks from next on: those due
// (tick plus its jitter) longer ago than window are skipped and counted,
// then the oldest one left is fired if it is due. False when nothing is
// due at now.
func (s *Schedule) Catchup(id string, next, now time.Time, window, jitter time.Duration) (Plan, bool) {
	if next.IsZero() || Due(id, next, jitter).After(now) {
		return Plan{}, false
	}
	var p Plan
	t := next
	oldest := now.Add(-window)
	if s.every > 0 && t.Before(oldest.Add(-s.every)) {
		// Jump over whole intervals: exact, and bounded whatever the gap.
		n := oldest.Sub(t) / s.every
		p.Skipped += uint64(n)
		t = t.Add(n * s.every)
	}
	for scanned := 0; !t.IsZero() && Due(id, t, jitter).Before(oldest); scanned++ {
		if scanned == maxSkipScan {
			t = s.Next(oldest.Add(-jitter))
			continue
		}
		p.Skipped++
		t = s.Next(t)
	}
	if !t.IsZero() && !Due(id, t, jitter).After(now) {
		p.Fire = t
		t = s.Next(t)
	}
	p.Next = t
	return p, p.Skipped > 0 || !p.Fire.IsZero()
}

// Due is when tick of schedule id is fired: the tick plus its jitter, a
// fraction of max derived from (id, tick), so that every leader fires a
// tick at the same moment and a fleet of schedules on the same spec does
// not fire at one instant.
func Due(id string, tick time.Time, max time.Duration) time.Time {
	if max <= 0 {
		return tick
	}
	h := sha256.New()
	h.Write([]byte(id))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(tick.UnixMilli()))
	h.Write(b[:])
	sum := h.Sum(nil)
	ms := max.Milliseconds()
	if ms <= 0 {
		return tick
	}
	return tick.Add(time.Duration(binary.BigEndian.Uint64(sum[:8])%uint64(ms)) * time.Millisecond)
}

// Overlap is what a tick does while the schedule's previous run has not
// completed.
type Overlap int

const (
	// Skip drops the tick (counted as skipped).
	Skip Overlap = iota
	// BufferOne keeps one tick to start when the run completes; further
	// ticks meanwhile are dropped.
	BufferOne
	// AllowAll starts the tick's run alongside.
	AllowAll
)

var overlapNames = [...]string{"skip", "buffer-one", "allow-all"}

func (o Overlap) String() string {
	if o < 0 || int(o) >= len(overlapNames) {
		return fmt.Sprintf("overlap(%d)", int(o))
	}
	return overlapNames[o]
}

// ParseOverlap reads an overlap policy; empty is Skip.
func ParseOverlap(s string) (Overlap, error) {
	if s == "" {
		return Skip, nil
	}
	for i, n := range overlapNames {
		if s == n {
			return Overlap(i), nil
		}
	}
	return 0, fmt.Errorf("%w: overlap %q: want skip, buffer-one or allow-all", ErrSpec, s)
}

// Action is what a tick does.
type Action int

const (
	Start  Action = iota // start its run now
	Buffer               // keep it until the running one completes
	Drop                 // skip it
)

// Decide is the overlap policy's action for a tick given whether a run is
// under way and whether a tick is buffered already.
func (o Overlap) Decide(running, buffered bool) Action {
	switch {
	case !running || o == AllowAll:
		return Start
	case o == BufferOne && !buffered:
		return Buffer
	}
	return Drop
}
