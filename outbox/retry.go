package outbox

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/raftgate/raftgate/internal/backoff"
	"github.com/raftgate/raftgate/rpc"
)

// Outcome is what an answer of a service means for its invocation.
type Outcome int

const (
	// Success: the answer is the invocation's result.
	Success Outcome = iota
	// Terminal: a failure retrying cannot fix; recorded as the result.
	Terminal
	// Retry: a transient failure; deliver again after a backoff.
	Retry
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Terminal:
		return "terminal"
	default:
		return "retry"
	}
}

// Classify maps an HTTP status of a service's answer to an outcome: 2xx
// succeed, 408, 429 and 5xx are retried, anything else (other 4xx, 1xx, 3xx)
// is a terminal failure.
func Classify(status int) Outcome {
	switch {
	case status >= 200 && status < 300:
		return Success
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status >= 500:
		return Retry
	default:
		return Terminal
	}
}

// Policy is the retry rule for failed deliveries.
type Policy struct {
	// MaxAttempts is the number of deliveries tried before a transient
	// failure becomes terminal (>= 1).
	MaxAttempts uint32
	// BackoffBase is the delay after the first failed attempt; it doubles
	// with every further attempt up to BackoffMax.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxRetryAfter caps how long a service's Retry-After may postpone the
	// next attempt.
	MaxRetryAfter time.Duration
	// AttemptTimeout bounds one delivery attempt; when it passes the
	// attempt failed (retried).
	AttemptTimeout time.Duration
	// PauseOnMaxAttempts keeps an invocation whose attempts are exhausted,
	// paused until an operator acts, instead of recording a terminal
	// failure (onMaxAttempts: pause | fail).
	PauseOnMaxAttempts bool
}

// DefaultPolicy returns production retry settings (docs/api.md states
// them).
func DefaultPolicy() Policy {
	return Policy{MaxAttempts: 10, BackoffBase: 100 * time.Millisecond, BackoffMax: 30 * time.Second,
		MaxRetryAfter: 5 * time.Minute, AttemptTimeout: 30 * time.Second, PauseOnMaxAttempts: true}
}

// For returns the policy of a service registered with r: each field r sets
// replaces p's (the cluster's defaults). A nil r is p. Backoffs that the
// override makes inconsistent (a base above the max) are clamped, so a
// service registered against other defaults still gets a valid policy.
func (p Policy) For(r *rpc.RetryPolicy) Policy {
	if n := r.GetMaxAttempts(); n > 0 {
		p.MaxAttempts = n
	}
	if ms := r.GetInitialBackoffMs(); ms > 0 {
		p.BackoffBase = time.Duration(ms) * time.Millisecond
	}
	if ms := r.GetMaxBackoffMs(); ms > 0 {
		p.BackoffMax = time.Duration(ms) * time.Millisecond
	}
	if ms := r.GetAttemptTimeoutMs(); ms > 0 {
		p.AttemptTimeout = time.Duration(ms) * time.Millisecond
	}
	switch r.GetOnMaxAttempts() {
	case rpc.RetryPolicy_PAUSE:
		p.PauseOnMaxAttempts = true
	case rpc.RetryPolicy_FAIL:
		p.PauseOnMaxAttempts = false
	}
	p.BackoffMax = max(p.BackoffMax, p.BackoffBase)
	return p
}

// ForHandler returns the policy of handler of service svc: the service's
// policy over p, then the handler's own fields over that.
func (p Policy) ForHandler(svc *rpc.Service, handler string) Policy {
	p = p.For(svc.GetRetry())
	for _, hc := range svc.GetHandlerConfig() {
		if hc.GetHandler() == handler {
			return p.For(hc.GetRetry())
		}
	}
	return p
}

// Proto is p in registration form, every field set.
func (p Policy) Proto() *rpc.RetryPolicy {
	on := rpc.RetryPolicy_FAIL
	if p.PauseOnMaxAttempts {
		on = rpc.RetryPolicy_PAUSE
	}
	return &rpc.RetryPolicy{
		MaxAttempts:      p.MaxAttempts,
		InitialBackoffMs: p.BackoffBase.Milliseconds(),
		MaxBackoffMs:     p.BackoffMax.Milliseconds(),
		AttemptTimeoutMs: p.AttemptTimeout.Milliseconds(),
		OnMaxAttempts:    on,
	}
}

// Validate names the first bad field.
func (p Policy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return errors.New("outbox: MaxAttempts must be >= 1")
	case p.BackoffBase <= 0:
		return errors.New("outbox: BackoffBase must be > 0")
	case p.BackoffMax < p.BackoffBase:
		return errors.New("outbox: BackoffMax must be >= BackoffBase")
	case p.MaxRetryAfter < 0:
		return errors.New("outbox: MaxRetryAfter must be >= 0")
	case p.AttemptTimeout <= 0:
		return errors.New("outbox: AttemptTimeout must be > 0")
	}
	return nil
}

// Exhausted reports whether failed attempt number attempt (1-based) was the
// last one allowed.
func (p Policy) Exhausted(attempt uint32) bool { return attempt >= p.MaxAttempts }

// Delay returns how long to wait after failed attempt number attempt
// (1-based): exponential backoff with "equal jitter" (half fixed, half
// random, so retries of many invocations spread out but never come back at
// once), or the service's Retry-After when that is longer (capped by
// MaxRetryAfter). rnd supplies the jitter; it is the caller's so that tests
// can seed it.
func (p Policy) Delay(attempt uint32, retryAfter time.Duration, rnd *rand.Rand) time.Duration {
	d := backoff.Delay(p.BackoffBase, p.BackoffMax, int(max(attempt, 1)-1), rnd)
	if retryAfter > d {
		d = min(retryAfter, p.MaxRetryAfter)
	}
	return d
}

// ParseRetryAfter reads a Retry-After header value: delay-seconds or an
// HTTP date (relative to now). It reports false when absent or malformed.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(value, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	if at, err := http.ParseTime(value); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}
