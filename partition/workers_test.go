package partition

import (
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

func TestWorkersReuseIdleWorker(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	w := newWorkers(time.Minute, stop)
	ran := 0
	testutil.WaitFor(t, 5*time.Second, "a job handed to an idle worker", func() bool {
		done := make(chan struct{})
		w.run(func() { ran++; close(done) })
		<-done
		return w.started.Load() < int64(ran)
	})
	if live := w.live.Load(); live > w.started.Load() || live < 1 {
		t.Fatalf("%d workers live of %d started", live, w.started.Load())
	}
}

func TestWorkersRunConcurrentJobsAndExit(t *testing.T) {
	stop := make(chan struct{})
	w := newWorkers(10*time.Millisecond, stop)
	// Three jobs that wait for each other need three workers: run never
	// queues a job behind a busy one.
	var all sync.WaitGroup
	all.Add(3)
	var finished sync.WaitGroup
	for range 3 {
		finished.Add(1)
		w.run(func() {
			defer finished.Done()
			all.Done()
			all.Wait()
		})
	}
	finished.Wait()
	testutil.WaitFor(t, 5*time.Second, "idle workers exit", func() bool { return w.live.Load() == 0 })
	if n := w.started.Load(); n != 3 {
		t.Fatalf("%d workers started, want 3", n)
	}
	// Stop ends idle workers at once.
	w.idle = time.Hour
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
	close(stop)
	testutil.WaitFor(t, 5*time.Second, "workers exit on stop", func() bool { return w.live.Load() == 0 })
}
