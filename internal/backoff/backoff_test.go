package backoff

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	b := Backoff{Base: 50 * time.Millisecond, Max: time.Second}
	wantCeil := []time.Duration{50, 100, 200, 400, 800, 1000, 1000, 1000}
	for i, ceil := range wantCeil {
		ceil *= time.Millisecond
		if d := b.Next(); d < ceil/2 || d > ceil {
			t.Fatalf("delay %d = %v, want in [%v, %v]", i, d, ceil/2, ceil)
		}
	}
	for range 100 { // no overflow however many retries
		if d := b.Next(); d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("late delay %v out of [500ms, 1s]", d)
		}
	}
	b.Reset()
	if d := b.Next(); d > 50*time.Millisecond {
		t.Fatalf("delay after Reset = %v, want at most Base", d)
	}
}

func TestDelaySeededReplays(t *testing.T) {
	a, b := rand.New(rand.NewPCG(7, 1)), rand.New(rand.NewPCG(7, 1))
	for n := range 20 {
		if x, y := Delay(time.Second, time.Hour, n, a), Delay(time.Second, time.Hour, n, b); x != y {
			t.Fatalf("retry %d: %v and %v from the same seed", n, x, y)
		}
	}
	if d := Delay(time.Nanosecond, time.Nanosecond, 3, nil); d != time.Nanosecond {
		t.Fatalf("a delay too short to halve = %v, want it whole", d)
	}
}
