package partition

import (
	"bytes"

	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
)

// A skip run is the leader's second cursor over the outbox (flow.go, "The
// scan window"): a stretch [from, to) of queue keys that a scan found made
// only of reserved deliveries and held ones of services under flow
// control, with, per fairness group, the group's first held deliveries
// in it (next) and how many more it holds (rest). The next scan that
// reaches the stretch does not walk it: it takes each group's candidates
// from next (the first ones not reserved, read and checked afresh, as a
// walk would have taken them), counts the others as skipped, and goes on
// at to. So a hot key's held backlog costs a scan its groups' candidates,
// not a walk over its keys.
//
// The run is leader-local soft state, dropped (invoker.dropRun) by
// whatever could put into the stretch something a walk would not skip:
// a delivery queued before to, an outcome or a mark applied for a
// delivery this leader did not reserve (another leader's, an operator's
// action), a released reservation, a rollback or Restore, and every
// IdleRecheck (the timer's wake-up reads the outbox from the first). A
// jump that cannot be made as a walk would (a group needs more
// candidates than next holds, a registration changed, a mark) is not
// made; the scan walks on and builds a new run. A jump that runs out of
// reads (ScanLimit) keeps the candidates it took and the run, and ends
// the scan; each jump starts at another group, so all get their turn. A
// jump never admits anything a walk would not: the candidates are read,
// checked and counted against the limits as any.
type skipRun struct {
	from, to []byte // queue keys
	groups   map[string]*runGroup
	n        int // held deliveries in the stretch
}

type runGroup struct {
	service string
	svc     *rpc.Service // the registration it was built under
	next    []runEntry   // the group's first held deliveries in the run
	rest    int          // its held deliveries after next
}

type runEntry struct {
	due int64
	id  []byte
}

// runNextMin is the fewest held deliveries a run remembers per group
// (twice the group's candidates, if more): the next jumps take their
// candidates from them until they run out, and a walk builds the run
// again.
const runNextMin = 64

// runMin is the fewest held deliveries a stretch needs to become the run
// (or a quarter of a walk, if fewer); runMaxGroups the most groups it
// holds, so a jump costs a bounded pass over their next deliveries (a
// stretch of more ends there).
const (
	runMin       = 32
	runMaxGroups = 128
)

// runBuilder collects the stretch a walk is in and keeps the longest.
type runBuilder struct {
	cur, best *skipRun
	lastKey   []byte // key of the last entry of cur (reused buffer)
}

// held extends the stretch with q, a held delivery of group g.
func (rb *runBuilder) held(q outbox.Queued, g string, svc *rpc.Service, keep int) {
	if rb.cur == nil {
		rb.cur = &skipRun{from: q.AppendKey(nil), groups: make(map[string]*runGroup)}
	}
	rg := rb.cur.groups[g]
	if rg == nil && len(rb.cur.groups) == runMaxGroups {
		rb.end()
		rb.held(q, g, svc, keep)
		return
	}
	if rg == nil {
		rg = &runGroup{service: string(q.Service), svc: svc}
		rb.cur.groups[g] = rg
	}
	if rg.rest == 0 && len(rg.next) < keep {
		rg.next = append(rg.next, runEntry{due: q.Due, id: bytes.Clone(q.ID)})
	} else {
		rg.rest++
	}
	rb.cur.n++
	rb.lastKey = q.AppendKey(rb.lastKey[:0])
}

// reserved extends the stretch, if one is open, with q, a reserved
// delivery.
func (rb *runBuilder) reserved(q outbox.Queued) {
	if rb.cur != nil {
		rb.lastKey = q.AppendKey(rb.lastKey[:0])
	}
}

// resume makes run the open stretch again, after a jump over it.
func (rb *runBuilder) resume(run *skipRun) {
	rb.cur = run
	rb.lastKey = append(rb.lastKey[:0], run.to...)
	rb.lastKey = rb.lastKey[:len(rb.lastKey)-1] // to is a last key ‖ 0
}

// end closes the open stretch: it ends after the last entry it holds.
func (rb *runBuilder) end() {
	if rb.cur == nil {
		return
	}
	rb.cur.to = append(bytes.Clone(rb.lastKey), 0)
	if rb.best == nil || rb.cur.n > rb.best.n {
		rb.best = rb.cur
	}
	rb.cur = nil
}

// run returns the longest stretch, nil when it holds fewer than least
// held deliveries.
func (rb *runBuilder) run(least int) *skipRun {
	rb.end()
	if rb.best == nil || rb.best.n < least {
		return nil
	}
	return rb.best
}

// dropRun forgets the skip run, and the one a scan under way would keep
// (runGen). Call with mu held.
func (iv *invoker) dropRun() {
	iv.skip = nil
	iv.runGen++
}
