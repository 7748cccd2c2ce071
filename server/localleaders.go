package server

import (
	"slices"
	"sync"
	"sync/atomic"
)

// localLeaders is the set of partitions this node's Raft says it leads,
// fed by leadership events and read by the ingress on every invocation
// whose partition is free to choose (--placement local). It follows this
// node's own Raft rather than the gossiped leader table, which keeps an
// entry of a leader that stepped down within its term.
type localLeaders struct {
	mu   sync.Mutex // serialises writers
	list atomic.Pointer[[]uint32]
}

// set records whether this node leads partition p.
func (l *localLeaders) set(p uint32, here bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.partitions()
	if slices.Contains(cur, p) == here {
		return
	}
	next := slices.DeleteFunc(slices.Clone(cur), func(q uint32) bool { return q == p })
	if here {
		next = append(next, p)
		slices.Sort(next)
	}
	l.list.Store(&next)
}

// partitions returns the partitions led here, sorted; the slice is shared
// and must not be modified.
func (l *localLeaders) partitions() []uint32 {
	if p := l.list.Load(); p != nil {
		return *p
	}
	return nil
}
