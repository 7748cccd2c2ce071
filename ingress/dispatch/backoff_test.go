package dispatch

import (
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	b := backoff{base: 50 * time.Millisecond, max: time.Second}
	wantCeil := []time.Duration{50, 100, 200, 400, 800, 1000, 1000, 1000}
	for i, ceil := range wantCeil {
		ceil *= time.Millisecond
		d := b.next()
		if d < ceil/2 || d > ceil {
			t.Fatalf("delay %d = %v, want in [%v, %v]", i, d, ceil/2, ceil)
		}
	}
	for range 100 { // no overflow however many retries
		if d := b.next(); d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("late delay %v out of [500ms, 1s]", d)
		}
	}
}
