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

// Spec is what a user gives: exactly one of Every, Repeat and Cron.
type Spec struct {
	Every time.Duration
	// Repeat is an ISO 8601 repeating interval: R/PT5M (like Every) or
	// R[n]/START/DURATION (ticks from START, n of them when n is given).
	Repeat string
	// Cron is a five-field expression or a descriptor (@daily).
	Cron string
	// TimeZone is an IANA name (Europe/Paris) for Cron; empty is UTC.
	TimeZone string
	// Start and End bound the ticks, both included (zero: unbounded).
	Start, End time.Time
}

// Schedule is a parsed Spec.
type Schedule struct {
	every time.Duration
	// anchor is an interval's first tick (zero: ticks aligned to the
	// epoch); count bounds how many ticks it has from there (0: no bound).
	anchor time.Time
	count  int64
	cron   *cron.SpecSchedule
	// start and end bound every spec's ticks (zero: unbounded).
	start, end time.Time
}

// MinEvery is the shortest interval: ticks are placed in milliseconds and
// fired by a leader loop, so finer ones would mostly be skipped.
const MinEvery = time.Second

// ErrSpec is wrapped by every error Parse returns.
var ErrSpec = errors.New("invalid schedule spec")

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse checks spec and returns its Schedule.
func Parse(spec Spec) (*Schedule, error) {
	s, err := parseTicks(spec)
	if err != nil {
		return nil, err
	}
	if !spec.Start.IsZero() && !spec.End.IsZero() && spec.End.Before(spec.Start) {
		return nil, fmt.Errorf("%w: end %v is before start %v", ErrSpec, spec.End, spec.Start)
	}
	s.start, s.end = spec.Start, spec.End
	return s, nil
}

// parseTicks parses the part of spec that places the ticks.
func parseTicks(spec Spec) (*Schedule, error) {
	given := 0
	for _, set := range []bool{spec.Every != 0, spec.Repeat != "", spec.Cron != ""} {
		if set {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, fmt.Errorf("%w: give one of an interval, a repeating interval or a cron expression", ErrSpec)
	case spec.Every != 0 || spec.Repeat != "":
		if spec.TimeZone != "" {
			return nil, fmt.Errorf("%w: a time zone applies to a cron expression only", ErrSpec)
		}
		s := &Schedule{every: spec.Every}
		if spec.Repeat != "" {
			r, err := parseRepeat(spec.Repeat)
			if err != nil {
				return nil, err
			}
			s.every, s.count = r.every, r.count
			if !r.anchor.IsZero() {
				s.anchor = time.UnixMilli(r.anchor.UnixMilli())
			}
		}
		if s.every < MinEvery || s.every%time.Millisecond != 0 {
			return nil, fmt.Errorf("%w: interval %v: want at least %v, in whole milliseconds", ErrSpec, s.every, MinEvery)
		}
		return s, nil
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
// is none (past the end, the count of a repeating interval, or a cron
// expression that never matches).
func (s *Schedule) Next(t time.Time) time.Time {
	if !s.start.IsZero() && t.Before(s.start) {
		t = s.start.Add(-time.Millisecond) // the start itself may be a tick
	}
	n := s.next(t)
	if n.IsZero() || !s.within(n) {
		return time.Time{}
	}
	return n
}

// last is an interval's last tick (zero: none, the ticks go on).
func (s *Schedule) last() time.Time {
	var l time.Time
	if s.count > 0 {
		l = s.anchor.Add(time.Duration(s.count-1) * s.every)
	}
	if !s.end.IsZero() {
		if e := s.next(s.end.Add(-s.every)); l.IsZero() || e.Before(l) {
			l = e
		}
	}
	return l
}

// within says whether tick (one of the spec's) is before the end and
// within the count.
func (s *Schedule) within(tick time.Time) bool {
	if !s.end.IsZero() && tick.After(s.end) {
		return false
	}
	return s.count == 0 || tick.Sub(s.anchor)/s.every < time.Duration(s.count)
}

// next is the first tick of the spec strictly after t, bounds aside.
func (s *Schedule) next(t time.Time) time.Time {
	if s.every > 0 {
		if !s.anchor.IsZero() && t.Before(s.anchor) {
			return s.anchor
		}
		base := s.anchor.UnixMilli()
		if s.anchor.IsZero() {
			base = 0
		}
		ms, every := t.UnixMilli()-base, s.every.Milliseconds()
		next := ms - ms%every + every
		if ms < 0 && ms%every != 0 {
			next -= every
		}
		return time.UnixMilli(base + next)
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
		if last := s.last(); !last.IsZero() && t.Add(n*s.every).After(last) {
			n = max(0, last.Sub(t)/s.every+1) // every tick left is skipped
			p.Skipped += uint64(n)
			return p, p.Skipped > 0
		}
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

// ErrTooManyTicks is wrapped by Between when a range holds more ticks
// than its bound.
var ErrTooManyTicks = errors.New("too many ticks")

// Between returns the ticks from from to to, both included, oldest first,
// or ErrTooManyTicks when there are more than max.
func (s *Schedule) Between(from, to time.Time, max int) ([]time.Time, error) {
	var out []time.Time
	for t := s.Next(from.Add(-time.Millisecond)); !t.IsZero() && !t.After(to); t = s.Next(t) {
		if len(out) == max {
			return nil, fmt.Errorf("%w: more than %d from %s to %s", ErrTooManyTicks, max,
				from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
		}
		out = append(out, t)
	}
	return out, nil
}
