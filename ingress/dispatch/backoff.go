package dispatch

import (
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with jitter: the n-th delay is
// drawn from [d/2, d] with d = min(max, base·2ⁿ), so that callers that
// failed together do not retry together.
type backoff struct {
	base, max time.Duration
	n         int
}

func (b *backoff) next() time.Duration {
	d := b.max
	if b.n < 30 {
		if e := b.base << b.n; e > 0 && e < b.max {
			d = e
		}
	}
	b.n++
	half := d / 2
	return half + rand.N(d-half+1)
}
