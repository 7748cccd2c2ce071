package partition

import (
	"sync/atomic"
	"time"
)

// workers runs the invoker's deliveries (and admits) on goroutines that
// outlive one delivery. A delivery's stack grows deep in net/http's client:
// a new goroutine per delivery grew it again from the minimum every time
// (about 2% of a node's CPU under /send); a worker keeps it for the next.
type workers struct {
	jobs chan func() // unbuffered: a send succeeds only to an idle worker
	idle time.Duration
	stop <-chan struct{}

	started, live atomic.Int64 // workers started so far, and running now
}

func newWorkers(idle time.Duration, stop <-chan struct{}) *workers {
	return &workers{jobs: make(chan func()), idle: idle, stop: stop}
}

// run runs job on an idle worker, or on a new one if none is idle. It never
// blocks, so there are at most as many workers as jobs ever ran at once.
func (w *workers) run(job func()) {
	select {
	case w.jobs <- job:
	default:
		w.started.Add(1)
		w.live.Add(1)
		go w.work(job)
	}
}

// work runs job, then the jobs handed to it, until it was idle for w.idle
// or the processor stops.
func (w *workers) work(job func()) {
	defer w.live.Add(-1)
	t := time.NewTimer(w.idle)
	defer t.Stop()
	for {
		job()
		t.Reset(w.idle)
		select {
		case job = <-w.jobs:
		case <-t.C:
			return
		case <-w.stop:
			return
		}
	}
}
