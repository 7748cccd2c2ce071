package results

import (
	"context"
	"fmt"
	"sync"

	"github.com/raftgate/raftgate/rpc"
)

// Waiters holds the callers waiting for results, keyed by invocation id.
// Safe for concurrent use.
type Waiters struct {
	max int

	mu sync.Mutex
	// byID and count are guarded by mu.
	byID  map[string]map[*Waiter]struct{}
	count int
}

// Waiter is one caller waiting for one invocation's result.
type Waiter struct {
	id   string
	done chan struct{} // closed once res or err is set
	res  *rpc.InvocationResult
	err  error
}

// NewWaiters returns an empty set that admits at most max waiters at once.
func NewWaiters(max int) *Waiters {
	return &Waiters{max: max, byID: make(map[string]map[*Waiter]struct{})}
}

// Add registers a waiter for id. Register before reading the stored state so
// that a Complete applied in between is not missed. It fails with
// rpc.ErrOverloaded when the set is full.
func (w *Waiters) Add(id []byte) (*Waiter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.count >= w.max {
		return nil, fmt.Errorf("results: %d attach waiters: %w", w.count, rpc.ErrOverloaded)
	}
	wt := &Waiter{id: string(id), done: make(chan struct{})}
	set := w.byID[wt.id]
	if set == nil {
		set = make(map[*Waiter]struct{})
		w.byID[wt.id] = set
	}
	set[wt] = struct{}{}
	w.count++
	return wt, nil
}

// Remove drops wt (its caller went away or got the result another way).
func (w *Waiters) Remove(wt *Waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeLocked(wt)
}

func (w *Waiters) removeLocked(wt *Waiter) {
	set := w.byID[wt.id]
	if _, ok := set[wt]; !ok {
		return
	}
	delete(set, wt)
	w.count--
	if len(set) == 0 {
		delete(w.byID, wt.id)
	}
}

// Complete answers every waiter of r's invocation with r. Never blocks.
func (w *Waiters) Complete(r *rpc.InvocationResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wt := range w.byID[string(r.InvocationId)] {
		wt.res = r
		close(wt.done)
		w.removeLocked(wt)
	}
}

// FailAll fails every waiter with err (leadership lost, shutdown). Never
// blocks.
func (w *Waiters) FailAll(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, set := range w.byID {
		for wt := range set {
			wt.err = err
			close(wt.done)
		}
	}
	w.byID = make(map[string]map[*Waiter]struct{})
	w.count = 0
}

// Len returns the number of waiters.
func (w *Waiters) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count
}

// Done is closed once the waiter was answered or failed.
func (wt *Waiter) Done() <-chan struct{} { return wt.done }

// Result returns the answer once Done is closed.
func (wt *Waiter) Result() (*rpc.InvocationResult, error) { return wt.res, wt.err }

// Wait blocks until the waiter is answered or ctx ends; on ctx end it is
// removed from w.
func (w *Waiters) Wait(ctx context.Context, wt *Waiter) (*rpc.InvocationResult, error) {
	select {
	case <-wt.done:
		return wt.res, wt.err
	case <-ctx.Done():
		w.Remove(wt)
		// An answer may have raced the cancellation; prefer it.
		select {
		case <-wt.done:
			return wt.res, wt.err
		default:
			return nil, ctx.Err()
		}
	}
}
