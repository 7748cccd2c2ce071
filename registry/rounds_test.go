package registry

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestRoundsShareAndNeverAnswerEarlyCallers: callers that arrive while a
// round runs share the next round (one for all of them), and are not
// answered by the round that was already running when they arrived (it may
// have read the leader's commit index before their write was answered).
func TestRoundsShareAndNeverAnswerEarlyCallers(t *testing.T) {
	release := make(chan struct{})
	started := make(chan int, 10)
	var mu sync.Mutex
	n := 0
	rs := newRounds(func(ctx context.Context) error {
		mu.Lock()
		n++
		id := n
		mu.Unlock()
		started <- id
		<-release
		return nil
	})
	first := make(chan error, 1)
	go func() { first <- rs.wait(context.Background()) }()
	if id := <-started; id != 1 {
		t.Fatalf("first round is %d", id)
	}
	// Round 1 runs; ten callers arrive.
	const late = 10
	done := make(chan int, late)
	for range late {
		go func() {
			_ = rs.wait(context.Background())
			mu.Lock()
			done <- n
			mu.Unlock()
		}()
	}
	// Wait until all of them joined the round behind round 1.
	deadline := time.Now().Add(5 * time.Second)
	for {
		rs.mu.Lock()
		gathered := rs.next != nil && rs.next.callers == late
		rs.mu.Unlock()
		if gathered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the late callers did not gather behind the running round")
		}
		time.Sleep(time.Millisecond) // poll interval
	}
	release <- struct{}{} // round 1 ends
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != 2 {
		t.Fatalf("second round is %d", id)
	}
	select {
	case got := <-done:
		t.Fatalf("a caller that arrived during round 1 was answered while only %d round(s) had run", got)
	default:
	}
	close(release) // round 2 (and any later) ends
	for range late {
		if got := <-done; got < 2 {
			t.Fatalf("a late caller answered after %d rounds, want at least 2", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 2 {
		t.Fatalf("%d rounds for 11 callers in two waves, want 2", n)
	}
}

// TestRoundsStopAtTheCallersContext: a caller whose context ends is not
// held by a round that does not end.
func TestRoundsStopAtTheCallersContext(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	rs := newRounds(func(ctx context.Context) error { <-block; return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := rs.wait(ctx); err != context.DeadlineExceeded {
		t.Fatalf("wait = %v, want the context's deadline", err)
	}
}
