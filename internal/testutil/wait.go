package testutil

import (
	"testing"
	"time"
)

// maxPoll bounds the interval between two checks of a WaitFor condition.
const maxPoll = 20 * time.Millisecond

// WaitFor polls cond until it holds, failing t with what it waited for
// once timeout has passed. The polling interval starts at a millisecond
// and grows to maxPoll, so quick conditions are seen at once and slow ones
// (an HTTP round trip) are not hammered.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	poll := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(poll) // polling interval of a condition, not synchronisation
		poll = min(2*poll, maxPoll)
	}
}
