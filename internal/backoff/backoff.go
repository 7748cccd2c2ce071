// Package backoff is raftgate's one retry delay: capped exponential
// backoff with "equal jitter". Retry number n waits a delay drawn from
// [d/2, d], d = min(max, base·2ⁿ): half fixed, so a retry never comes back
// at once, half random, so callers that failed together do not retry
// together. The dispatch client, raft's peer streams and the outbox's
// retry policy all use it.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Delay returns the delay before retry n (0 for the first retry). rnd
// supplies the jitter (a caller that must replay seeds its own); nil uses
// the global source.
func Delay(base, max time.Duration, n int, rnd *rand.Rand) time.Duration {
	d := base
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	if half <= 0 {
		return d
	}
	if rnd == nil {
		return half + rand.N(d-half+1)
	}
	return half + time.Duration(rnd.Int64N(int64(d-half)+1))
}

// Backoff hands out the delays of successive retries. The zero value is
// not usable: set Base and Max (Max >= Base > 0). Not safe for concurrent
// use.
type Backoff struct {
	Base, Max time.Duration
	n         int
}

// Next returns the delay before the next retry.
func (b *Backoff) Next() time.Duration {
	d := Delay(b.Base, b.Max, b.n, nil)
	b.n++
	return d
}

// Reset starts over from Base (the operation succeeded).
func (b *Backoff) Reset() { b.n = 0 }
