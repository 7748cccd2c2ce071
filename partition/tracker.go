package partition

import (
	"fmt"
	"sync"

	"github.com/raftgate/raftgate/rpc"
)

// tracker holds the leader's pending requests (keyed by request id) and the
// leadership they are valid for. A request's reply is delivered only when
// its entry applies in the term the request was proposed in; any loss of
// leadership fails every pending request at once.
type tracker struct {
	max int

	mu sync.Mutex
	// All fields below are guarded by mu.
	leading bool
	leader  uint64
	term    uint64
	closed  bool
	pending map[string]*pendingRequest
	nextGen uint64
}

// pendingRequest is one logical request waiting for its entry. A retry of
// the same request id takes it over (replacing ch) instead of proposing
// again.
type pendingRequest struct {
	gen uint64
	// term is the term Propose returned for the request's entry; 0 until
	// Propose returned. Replies that apply before are kept in early.
	term  uint64
	early []reply
	ch    chan reply // buffered 1; receives exactly one reply
}

// ticket identifies one registration of a request.
type ticket struct {
	requestID string
	gen       uint64
	ch        chan reply
	term      uint64 // leader term at registration, stamped in the command
}

// errSuperseded fails a waiter whose request was retried on another
// stream; the retry gets the reply.
var errSuperseded = fmt.Errorf("partition: request superseded by its retry: %w", rpc.ErrLostLeadership)

func newTracker(max int) *tracker {
	return &tracker{max: max, pending: make(map[string]*pendingRequest)}
}

// register adds a waiter for requestID. propose is false when the request
// was already pending: the new waiter took over its reply.
func (t *tracker) register(requestID string) (tk ticket, propose bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || !t.leading {
		return ticket{}, false, t.notLeaderLocked()
	}
	ch := make(chan reply, 1)
	if pr := t.pending[requestID]; pr != nil {
		pr.ch <- reply{err: errSuperseded}
		pr.ch = ch
		return ticket{requestID: requestID, gen: pr.gen, ch: ch, term: t.term}, false, nil
	}
	if len(t.pending) >= t.max {
		return ticket{}, false, fmt.Errorf("partition: %d pending requests: %w", len(t.pending), rpc.ErrOverloaded)
	}
	t.nextGen++
	t.pending[requestID] = &pendingRequest{gen: t.nextGen, ch: ch}
	return ticket{requestID: requestID, gen: t.nextGen, ch: ch, term: t.term}, true, nil
}

// forget removes tk's waiter after its caller went away. The request stays
// proposable by a retry (de-duplicated on apply).
func (t *tracker) forget(tk ticket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pr := t.pending[tk.requestID]; pr != nil && pr.gen == tk.gen && pr.ch == tk.ch {
		delete(t.pending, tk.requestID)
	}
}

// alive reports whether tk's registration is still waiting.
func (t *tracker) alive(tk ticket) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	pr := t.pending[tk.requestID]
	return pr != nil && pr.gen == tk.gen
}

// proposed records the term Propose returned for the tickets' entry and
// delivers a reply that applied in the meantime.
func (t *tracker) proposed(tks []ticket, term uint64) {
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
			t.deliverLocked(tk.requestID, pr, reply{err: rpc.ErrLostLeadership})
			continue
		}
		pr.term = term
		early := pr.early
		pr.early = nil
		for _, r := range early {
			if r.term == term {
				t.deliverLocked(tk.requestID, pr, r)
				break
			}
		}
	}
}

// fail fails the tickets' waiters (their proposal was refused).
func (t *tracker) fail(tks []ticket, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tk := range tks {
		if pr := t.pending[tk.requestID]; pr != nil && pr.gen == tk.gen {
			t.deliverLocked(tk.requestID, pr, reply{err: err})
		}
	}
}

// resolve hands an applied entry's reply to the waiter of the same term.
// Never blocks.
func (t *tracker) resolve(r reply) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pr := t.pending[r.requestID]
	switch {
	case pr == nil:
	case pr.term == 0:
		// Applied before Propose returned: keep until the term is known.
		// Only a handful of entries can carry one request id, so this
		// stays small.
		if len(pr.early) < 8 {
			pr.early = append(pr.early, r)
		}
	case pr.term == r.term:
		t.deliverLocked(r.requestID, pr, r)
	}
}

func (t *tracker) deliverLocked(requestID string, pr *pendingRequest, r reply) {
	pr.ch <- r
	delete(t.pending, requestID)
}

// setLeadership records a leadership event. Any loss of leadership (another
// leader, another term, none) fails every pending request; lost reports it.
func (t *tracker) setLeadership(leader, term uint64, self bool) (lost bool) {
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

// close fails everything and refuses new requests.
func (t *tracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.leading = false
	t.failAllLocked(rpc.ErrLostLeadership)
}

func (t *tracker) failAllLocked(err error) {
	for id, pr := range t.pending {
		pr.ch <- reply{err: err}
		delete(t.pending, id)
	}
}

// leadership returns the leadership this node knows.
func (t *tracker) leadership() (leading bool, leader, term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading && !t.closed, t.leader, t.term
}

func (t *tracker) notLeaderLocked() *rpc.NotLeaderError {
	leader := t.leader
	if t.leading || t.closed {
		leader = 0 // we are closing: do not point callers back here
	}
	return &rpc.NotLeaderError{Leader: leader, Term: t.term}
}

func (t *tracker) notLeader() *rpc.NotLeaderError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.notLeaderLocked()
}

func (t *tracker) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
