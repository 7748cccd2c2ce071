package schedule

import (
	"errors"
	"testing"
	"time"
)

func TestStartAndEnd(t *testing.T) {
	base := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	start, end := base.Add(10*time.Minute), base.Add(20*time.Minute)
	for _, spec := range []Spec{{Every: 5 * time.Minute}, {Repeat: "R/PT5M"}, {Cron: "*/5 * * * *"}} {
		spec.Start, spec.End = start, end
		s := mustParse(t, spec)
		var got []time.Time
		for tick := s.Next(base); !tick.IsZero(); tick = s.Next(tick) {
			got = append(got, tick)
		}
		want := []time.Time{start, start.Add(5 * time.Minute), end}
		if len(got) != len(want) || !got[0].Equal(want[0]) || !got[1].Equal(want[1]) || !got[2].Equal(want[2]) {
			t.Fatalf("%+v: ticks %v, want %v", spec, got, want)
		}
		if n := s.Next(end.Add(time.Hour)); !n.IsZero() {
			t.Fatalf("%+v: a tick %v after the end", spec, n)
		}
	}
	if _, err := Parse(Spec{Every: time.Minute, Start: end, End: start}); !errors.Is(err, ErrSpec) {
		t.Fatalf("end before start: %v, want ErrSpec", err)
	}
}

// A leader back after downtime past the end skips what is left and the
// schedule has no next tick; with a count, the same.
func TestCatchupStopsAtTheEnd(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, spec := range []Spec{
		{Every: time.Minute, End: base.Add(9 * time.Minute)},
		{Repeat: "R10/2026-12-01T00:00:00Z/PT1M"},
	} {
		s := mustParse(t, spec)
		// Down from the first tick to long after the end: the jump over
		// whole intervals stops at the last tick.
		p, ok := s.Catchup("a", base, base.Add(24*time.Hour), time.Minute, 0)
		if !ok || p.Skipped != 10 || !p.Fire.IsZero() || !p.Next.IsZero() {
			t.Fatalf("%+v: plan %+v %v, want 10 skipped and nothing next", spec, p, ok)
		}
		// Back in time for the last tick: it runs, and nothing follows.
		p, ok = s.Catchup("a", base, base.Add(9*time.Minute+time.Second), 30*time.Second, 0)
		if !ok || p.Skipped != 9 || !p.Fire.Equal(base.Add(9*time.Minute)) || !p.Next.IsZero() {
			t.Fatalf("%+v: plan %+v %v, want 9 skipped, the last fired, nothing next", spec, p, ok)
		}
	}
}

func TestBetween(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := mustParse(t, Spec{Every: time.Hour})
	got, err := s.Between(base, base.Add(3*time.Hour), 10)
	if err != nil || len(got) != 4 || !got[0].Equal(base) || !got[3].Equal(base.Add(3*time.Hour)) {
		t.Fatalf("ticks %v %v, want 4 from base to 3h later, both included", got, err)
	}
	if got, err := s.Between(base.Add(time.Minute), base.Add(59*time.Minute), 10); err != nil || len(got) != 0 {
		t.Fatalf("no tick in range: %v %v", got, err)
	}
	if _, err := s.Between(base, base.Add(10*time.Hour), 10); !errors.Is(err, ErrTooManyTicks) {
		t.Fatalf("11 ticks with a bound of 10: %v, want ErrTooManyTicks", err)
	}
}
