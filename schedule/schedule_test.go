package schedule

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"
)

var seed = flag.Uint64("seed", 0, "seed for randomised tests (0: time-based, printed)")

func testRand(t *testing.T) *rand.Rand {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed=%d)", s, s)
	return rand.New(rand.NewPCG(s, s))
}

func mustParse(t *testing.T, spec Spec) *Schedule {
	t.Helper()
	s, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ticks walks the schedule from from (exclusive) to to (inclusive).
func ticks(s *Schedule, from, to time.Time) []time.Time {
	var out []time.Time
	for t := s.Next(from); !t.After(to); t = s.Next(t) {
		out = append(out, t)
	}
	return out
}

func TestCronInTimeZoneAcrossDST(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, paris) }
	cases := []struct {
		name string
		cron string
		from time.Time
		to   time.Time
		want []string // UTC
	}{
		{
			// Spring forward: 2024-03-31 02:00 → 03:00 local. 02:00 daily
			// runs at 01:00Z before (CET) and 00:00Z after (CEST); the
			// night of the change has no 02:00 and is not fired.
			name: "spring forward, 02:00 daily",
			cron: "0 2 * * *", from: at(2024, 3, 29, 12, 0), to: at(2024, 4, 2, 12, 0),
			want: []string{"2024-03-30T01:00:00Z", "2024-04-01T00:00:00Z", "2024-04-02T00:00:00Z"},
		},
		{
			// Fall back: 2024-10-27 03:00 → 02:00 local; 02:30 happens
			// twice and fires once.
			name: "fall back, 02:30 daily",
			cron: "30 2 * * *", from: at(2024, 10, 25, 12, 0), to: at(2024, 10, 28, 12, 0),
			want: []string{"2024-10-26T00:30:00Z", "2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"},
		},
		{
			// 01:00 CET, then 03:00 and 04:00 CEST: one hour apart each.
			name: "hourly keeps real hours across spring forward",
			cron: "0 * * * *", from: at(2024, 3, 31, 0, 30), to: at(2024, 3, 31, 4, 30),
			want: []string{"2024-03-31T00:00:00Z", "2024-03-31T01:00:00Z", "2024-03-31T02:00:00Z"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mustParse(t, Spec{Cron: c.cron, TimeZone: "Europe/Paris"})
			var got []string
			for _, tk := range ticks(s, c.from, c.to) {
				got = append(got, tk.UTC().Format(time.RFC3339))
			}
			if len(got) != len(c.want) {
				t.Fatalf("ticks %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("ticks %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, spec := range []Spec{
		{},
		{Every: time.Minute, Cron: "* * * * *"},
		{Every: 10 * time.Millisecond},
		{Every: time.Minute, TimeZone: "Europe/Paris"},
		{Cron: "61 * * * *"},
		{Cron: "0 2 * * *", TimeZone: "Mars/Olympus"},
		{Cron: "@every 5m"},
		{Cron: "CRON_TZ=Europe/Paris 0 2 * * *"},
	} {
		if _, err := Parse(spec); err == nil {
			t.Errorf("Parse(%+v) accepted", spec)
		}
	}
}

func TestEveryIsEpochAligned(t *testing.T) {
	r := testRand(t)
	s := mustParse(t, Spec{Every: 5 * time.Minute})
	for range 1000 {
		at := time.UnixMilli(r.Int64N(4e12) - 1e12)
		n := s.Next(at)
		if !n.After(at) || n.Sub(at) > 5*time.Minute || n.UnixMilli()%(5*60*1000) != 0 {
			t.Fatalf("Next(%v) = %v", at.UnixMilli(), n.UnixMilli())
		}
	}
}

func TestCatchup(t *testing.T) {
	s := mustParse(t, Spec{Every: time.Second})
	base := time.UnixMilli(1_700_000_000_000)
	// Not yet due.
	if _, ok := s.Catchup("a", base, base.Add(-time.Millisecond), time.Minute, 0); ok {
		t.Fatal("fired before due")
	}
	// Due now: fire it.
	p, ok := s.Catchup("a", base, base, time.Minute, 0)
	if !ok || !p.Fire.Equal(base) || p.Skipped != 0 || !p.Next.Equal(base.Add(time.Second)) {
		t.Fatalf("on time: %+v %v", p, ok)
	}
	// Down 3 s, within a 10 s window: the oldest missed tick fires first.
	p, _ = s.Catchup("a", base, base.Add(3*time.Second), 10*time.Second, 0)
	if !p.Fire.Equal(base) || p.Skipped != 0 {
		t.Fatalf("within window: %+v", p)
	}
	// Down 100 s with a 10 s window: 90 ticks skipped, then the oldest
	// within the window fires.
	p, _ = s.Catchup("a", base, base.Add(100*time.Second), 10*time.Second, 0)
	if p.Skipped != 90 || !p.Fire.Equal(base.Add(90*time.Second)) || !p.Next.Equal(base.Add(91*time.Second)) {
		t.Fatalf("past window: %+v", p)
	}
	// Window 0 and a tick just late: skipped, none fired, next in the future.
	p, ok = s.Catchup("a", base, base.Add(1500*time.Millisecond), 0, 0)
	if !ok || p.Skipped != 2 || !p.Fire.IsZero() || !p.Next.Equal(base.Add(2*time.Second)) {
		t.Fatalf("window 0: %+v", p)
	}
	// A year of a minutely cron is counted, bounded.
	c := mustParse(t, Spec{Cron: "* * * * *"})
	start := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
	p, _ = c.Catchup("c", start, start.AddDate(1, 0, 0), time.Minute, 0)
	if p.Skipped < 525_000 || p.Fire.IsZero() {
		t.Fatalf("year: %+v", p)
	}
}

func TestCatchupReplayedAfterLeaderChange(t *testing.T) {
	// A new leader recomputing from the replicated next tick reaches the
	// same plan as the old one: the plan is a function of its inputs.
	r := testRand(t)
	s := mustParse(t, Spec{Every: 7 * time.Second})
	for range 200 {
		ms := 1_700_000_000_000 + r.Int64N(1e9)
		next := time.UnixMilli(ms - ms%7000)
		now := next.Add(time.Duration(r.Int64N(int64(time.Hour))))
		win := time.Duration(r.Int64N(int64(10 * time.Minute)))
		a, okA := s.Catchup("x", next, now, win, 3*time.Second)
		b, okB := s.Catchup("x", next, now, win, 3*time.Second)
		if a != b || okA != okB {
			t.Fatalf("plans differ: %+v %+v", a, b)
		}
		// Everything before Next is accounted for: fired or skipped.
		n := uint64(a.Next.Sub(next) / (7 * time.Second))
		fired := uint64(0)
		if !a.Fire.IsZero() {
			fired = 1
		}
		if okA && a.Skipped+fired != n {
			t.Fatalf("next=%v now=%v win=%v: skipped %d + fired %d != %d ticks passed", next, now, win, a.Skipped, fired, n)
		}
	}
}

func TestJitterIsDeterministicAndBounded(t *testing.T) {
	r := testRand(t)
	for range 1000 {
		tick := time.UnixMilli(r.Int64N(1e13))
		d := Due("s", tick, 10*time.Second)
		if d.Before(tick) || d.Sub(tick) >= 10*time.Second || !d.Equal(Due("s", tick, 10*time.Second)) {
			t.Fatalf("Due(%v) = %v", tick, d)
		}
	}
}

func TestOverlap(t *testing.T) {
	cases := []struct {
		o                 Overlap
		running, buffered bool
		want              Action
	}{
		{Skip, false, false, Start}, {Skip, true, false, Drop},
		{BufferOne, false, false, Start}, {BufferOne, true, false, Buffer}, {BufferOne, true, true, Drop},
		{AllowAll, true, true, Start}, {AllowAll, false, false, Start},
	}
	for _, c := range cases {
		if got := c.o.Decide(c.running, c.buffered); got != c.want {
			t.Errorf("%v.Decide(%v, %v) = %v, want %v", c.o, c.running, c.buffered, got, c.want)
		}
	}
	for _, name := range []string{"skip", "buffer-one", "allow-all"} {
		o, err := ParseOverlap(name)
		if err != nil || o.String() != name {
			t.Errorf("ParseOverlap(%q) = %v, %v", name, o, err)
		}
	}
	if _, err := ParseOverlap("queue"); err == nil {
		t.Error("ParseOverlap accepted queue")
	}
}
