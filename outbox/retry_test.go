package outbox

import (
	"testing"
	"time"

	"github.com/raftgate/raftgate/rpc"
)

func TestPolicyFor(t *testing.T) {
	d := DefaultPolicy()
	if got := d.For(nil); got != d {
		t.Fatalf("For(nil) = %+v, want the defaults", got)
	}
	got := d.For(&rpc.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 500, AttemptTimeoutMs: 2000})
	want := d
	want.MaxAttempts, want.BackoffBase, want.AttemptTimeout = 3, 500*time.Millisecond, 2*time.Second
	if got != want {
		t.Fatalf("For = %+v, want %+v", got, want)
	}
	// A base above the default max raises the max with it.
	if got := d.For(&rpc.RetryPolicy{InitialBackoffMs: 60_000}); got.BackoffMax != time.Minute || got.Validate() != nil {
		t.Fatalf("For with a large base = %+v", got)
	}
	p := d.For(&rpc.RetryPolicy{MaxBackoffMs: 1000}).Proto()
	if p.MaxAttempts != 10 || p.InitialBackoffMs != 100 || p.MaxBackoffMs != 1000 || p.AttemptTimeoutMs != 30_000 {
		t.Fatalf("Proto = %v", p)
	}
}
