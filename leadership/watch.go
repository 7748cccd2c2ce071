package leadership

import "sync"

// Watch calls fn for every change of the leader table, starting with the
// entries known when Watch is called. fn runs on a goroutine of its own,
// never concurrently with itself; changes of one partition that come faster
// than fn returns are coalesced (fn sees the latest entry, and always sees
// the final one). After cancel returns, at most one call that had
// already begun may still run; cancel may be called from fn. Close stops every
// watcher and waits for them.
func (m *Membership) Watch(fn func(partition uint32, leader, term uint64)) (cancel func()) {
	w := &watcher{fn: fn, pending: map[uint32]Entry{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	m.mu.Lock()
	select {
	case <-m.stop:
		m.mu.Unlock()
		return func() {}
	default:
	}
	id := m.nextWatch
	m.nextWatch++
	m.watchers[id] = w
	w.queue(m.leaders.updates())
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		w.run()
	}()
	return func() {
		m.mu.Lock()
		delete(m.watchers, id)
		m.mu.Unlock()
		w.stop()
	}
}

// notifyLocked queues changes for every watcher; m.mu is held.
func (m *Membership) notifyLocked(us []Update) {
	if len(us) == 0 {
		return
	}
	for _, w := range m.watchers {
		w.queue(us)
	}
}

// watcher delivers coalesced changes to one callback.
type watcher struct {
	fn func(partition uint32, leader, term uint64)

	// mu guards pending.
	mu      sync.Mutex
	pending map[uint32]Entry

	wake     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func (w *watcher) queue(us []Update) {
	w.mu.Lock()
	for _, u := range us {
		w.pending[u.Partition] = u.Entry
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) run() {
	for {
		select {
		case <-w.done:
			return
		case <-w.wake:
		}
		w.mu.Lock()
		batch := w.pending
		w.pending = map[uint32]Entry{}
		w.mu.Unlock()
		for _, u := range (table(batch)).updates() {
			select {
			case <-w.done:
				return
			default:
			}
			w.fn(u.Partition, u.Leader, u.Term)
		}
	}
}

// stop ends run before its next call.
func (w *watcher) stop() {
	w.stopOnce.Do(func() { close(w.done) })
}
