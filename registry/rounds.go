package registry

import (
	"context"
	"errors"
	"sync"
)

// rounds shares catch-up rounds among concurrent callers. A round that is
// already running may have read the leader's commit index before a caller
// arrived, so it cannot answer that caller; every caller joins the next
// round that starts after it arrived: the running one's successor, which
// starts as soon as the running one ends. However many callers arrive, at
// most one round runs at a time, with one more gathering callers behind
// it, so the catch-up on every call and delivery costs one read round per
// round trip, not one per call.
type rounds struct {
	run func(ctx context.Context) error // one round (MetaLog.CatchUp)
	// ctx is every round's parent; close cancels it, ending the running
	// round, and waits for the loop (wg).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running bool
	closed  bool
	next    *round // gathers callers while a round runs
}

// errClosed answers a catch-up on a closed registry.
var errClosed = errors.New("registry: closed")

func newRounds(run func(ctx context.Context) error) *rounds {
	ctx, cancel := context.WithCancel(context.Background())
	return &rounds{run: run, ctx: ctx, cancel: cancel}
}

// close ends the running round (its callers, and those of the round
// gathering behind it, get its error) and waits for the loop; later calls
// of wait fail with errClosed.
func (rs *rounds) close() {
	rs.mu.Lock()
	rs.closed = true
	rs.mu.Unlock()
	rs.cancel()
	rs.wg.Wait()
}

type round struct {
	done    chan struct{}
	err     error
	callers int // guarded by rounds.mu
}

// wait joins the next round to start and returns its outcome, or ctx's
// error if ctx ends first.
func (rs *rounds) wait(ctx context.Context) error {
	rs.mu.Lock()
	var r *round
	switch {
	case rs.closed:
		rs.mu.Unlock()
		return errClosed
	case !rs.running:
		rs.running = true
		r = &round{done: make(chan struct{})}
		rs.wg.Add(1)
		go rs.loop(r)
	default:
		if rs.next == nil {
			rs.next = &round{done: make(chan struct{})}
		}
		r = rs.next
	}
	r.callers++
	rs.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop runs r, then the round that gathered callers meanwhile, until none
// did.
func (rs *rounds) loop(r *round) {
	defer rs.wg.Done()
	for r != nil {
		ctx, cancel := context.WithTimeout(rs.ctx, catchUpRound)
		r.err = rs.run(ctx)
		cancel()
		close(r.done)
		rs.mu.Lock()
		r, rs.next = rs.next, nil
		if r == nil {
			rs.running = false
		}
		rs.mu.Unlock()
	}
}
