package proposals

import (
	"fmt"
	"sync"

	"github.com/raftgate/raftgate/rpc"
)

// Reply is what a waiter receives: the value its entry produced, or why it
// got none.
type Reply[R any] struct {
	Value R
	Err   error
}

// Ticket identifies one registration of a request.
type Ticket[R any] struct {
	// C receives the registration's reply, exactly once.
	C         <-chan Reply[R]
	requestID string
	gen       uint64
}

// Tracked reports whether t came from Register (the zero Ticket did not).
func (t Ticket[R]) Tracked() bool { return t.C != nil }

// ErrSuperseded fails a waiter whose request was registered again (a retry
// on another stream); the retry gets the reply. It wraps
// rpc.ErrLostLeadership, so callers treat it as an ambiguous outcome.
var ErrSuperseded = fmt.Errorf("request superseded by its retry: %w", rpc.ErrLostLeadership)

// Tracker holds the pending requests of one Raft group on its leader. See
// the package doc for the order of calls.
type Tracker[R any] struct {
	max int

	mu sync.Mutex
	// All fields below are guarded by mu.
	leading bool
	leader  uint64
	term    uint64
	closed  bool
	pending map[string]*request[R]
	nextGen uint64
}

// request is one logical request waiting for its entry.
type request[R any] struct {
	gen uint64
	// term is the term Propose returned for the request's entry; 0 until
	// Proposed. Replies that apply before are kept in early.
	term  uint64
	early []earlyReply[R]
	ch    chan Reply[R] // buffered 1; receives exactly one reply
}

type earlyReply[R any] struct {
	term  uint64
	reply Reply[R]
}

// maxEarly bounds the replies kept for one request before Proposed: only a
// handful of entries can carry one request id.
const maxEarly = 8

// NewTracker returns a tracker that holds at most max pending requests.
// It leads nothing until SetLeadership says so.
func NewTracker[R any](max int) *Tracker[R] {
	return &Tracker[R]{max: max, pending: make(map[string]*request[R])}
}

// Register adds a waiter for requestID. propose is false when the request
// was already pending: the new waiter took over its reply. Fails with
// *rpc.NotLeaderError unless this node leads, rpc.ErrOverloaded when max
// requests are pending.
func (t *Tracker[R]) Register(requestID string) (tk Ticket[R], propose bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || !t.leading {
		return Ticket[R]{}, false, t.notLeaderLocked()
	}
	ch := make(chan Reply[R], 1)
	if pr := t.pending[requestID]; pr != nil {
		pr.ch <- Reply[R]{Err: ErrSuperseded}
		pr.ch = ch
		return Ticket[R]{C: ch, requestID: requestID, gen: pr.gen}, false, nil
	}
	if len(t.pending) >= t.max {
		return Ticket[R]{}, false, fmt.Errorf("%d pending requests: %w", len(t.pending), rpc.ErrOverloaded)
	}
	t.nextGen++
	t.pending[requestID] = &request[R]{gen: t.nextGen, ch: ch}
	return Ticket[R]{C: ch, requestID: requestID, gen: t.nextGen}, true, nil
}

// Forget removes tk's waiter after its caller went away. The request stays
// proposable by a retry.
func (t *Tracker[R]) Forget(tk Ticket[R]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pr := t.pending[tk.requestID]; pr != nil && pr.gen == tk.gen && pr.ch == tk.C {
		delete(t.pending, tk.requestID)
	}
}

// Alive reports whether tk's request is still waiting (by tk's caller or a
// retry that took it over), so that its command is still worth proposing.
func (t *Tracker[R]) Alive(tk Ticket[R]) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	pr := t.pending[tk.requestID]
	return pr != nil && pr.gen == tk.gen
}

// Proposed records the term Propose returned for the tickets' entry and
// delivers a reply that applied in the meantime.
func (t *Tracker[R]) Proposed(tks []Ticket[R], term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tk := range tks {
		pr := t.pending[tk.requestID]
		if pr == nil || pr.gen != tk.gen {
			continue
		}
		if !t.leading || term != t.term {
			// Raft is already in another term than the one we lead:
			// the reply can only come from a term we no longer track.
			t.deliverLocked(tk.requestID, pr, Reply[R]{Err: rpc.ErrLostLeadership})
			continue
		}
		pr.term = term
		early := pr.early
		pr.early = nil
		for _, e := range early {
			if e.term == term {
				t.deliverLocked(tk.requestID, pr, e.reply)
				break
			}
		}
	}
}

// Fail fails the tickets' waiters (their proposal was refused).
func (t *Tracker[R]) Fail(tks []Ticket[R], err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tk := range tks {
		if pr := t.pending[tk.requestID]; pr != nil && pr.gen == tk.gen {
			t.deliverLocked(tk.requestID, pr, Reply[R]{Err: err})
		}
	}
}

// Resolve hands the reply of an entry of term that carried requestID to
// its waiter, if that waiter proposed it in the same term. requestID is
// bytes, as decoded from the entry: looking it up copies nothing.
func (t *Tracker[R]) Resolve(requestID []byte, term uint64, r Reply[R]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pr := t.pending[string(requestID)]
	switch {
	case pr == nil:
	case pr.term == 0:
		// Applied before Propose returned: keep until the term is known.
		if len(pr.early) < maxEarly {
			pr.early = append(pr.early, earlyReply[R]{term: term, reply: r})
		}
	case pr.term == term:
		pr.ch <- r // deliverLocked, without converting the key to a string
		delete(t.pending, string(requestID))
	}
}

func (t *Tracker[R]) deliverLocked(requestID string, pr *request[R], r Reply[R]) {
	pr.ch <- r
	delete(t.pending, requestID)
}

// SetLeadership records a leadership event of the group. Any loss of
// leadership (another leader, another term, none) fails every pending
// request; lost reports it. Events of an older term are ignored.
func (t *Tracker[R]) SetLeadership(leader, term uint64, self bool) (lost bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term < t.term || t.closed {
		return false // stale event
	}
	if t.leading && (!self || term != t.term) {
		t.failAllLocked(rpc.ErrLostLeadership)
		lost = true
	}
	t.leader, t.term, t.leading = leader, term, self
	return lost
}

// Close fails everything and refuses new requests.
func (t *Tracker[R]) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.leading = false
	t.failAllLocked(rpc.ErrLostLeadership)
}

func (t *Tracker[R]) failAllLocked(err error) {
	for id, pr := range t.pending {
		pr.ch <- Reply[R]{Err: err}
		delete(t.pending, id)
	}
}

// Leadership returns the leadership this tracker knows.
func (t *Tracker[R]) Leadership() (leading bool, leader, term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading && !t.closed, t.leader, t.term
}

// NotLeader is the error for a request this node cannot take: the leader
// and term it knows (no leader once closing, so callers are not pointed
// back here).
func (t *Tracker[R]) NotLeader() *rpc.NotLeaderError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.notLeaderLocked()
}

func (t *Tracker[R]) notLeaderLocked() *rpc.NotLeaderError {
	leader := t.leader
	if t.leading || t.closed {
		leader = 0
	}
	return &rpc.NotLeaderError{Leader: leader, Term: t.term}
}

// Len returns the number of pending requests.
func (t *Tracker[R]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
