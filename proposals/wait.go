package proposals

import (
	"context"

	"github.com/raftgate/raftgate/raftlog"
)

// Proposer appends entries to a group's log; *raftlog.Group satisfies it.
type Proposer interface {
	Propose(ctx context.Context, data []byte) (raftlog.Proposal, error)
}

// ProposeAndWait is the whole round for one request with a fresh id: it
// registers requestID with t, proposes data through log and waits for the
// reply of the entry's apply. proposeErr maps a refused Propose to the error
// the waiter gets. When ctx ends first the waiter is forgotten (a reply that
// arrived meanwhile still wins).
func ProposeAndWait[R any](ctx context.Context, t *Tracker[R], log Proposer, requestID, data []byte, proposeErr func(error) error) (R, error) {
	tk, _, err := t.Register(string(requestID))
	if err != nil {
		var zero R
		return zero, err
	}
	prop, err := log.Propose(ctx, data)
	if err != nil {
		t.Fail([]Ticket[R]{tk}, proposeErr(err))
	} else {
		t.Proposed([]Ticket[R]{tk}, prop.Term)
	}
	select {
	case reply := <-tk.C:
		return reply.Value, reply.Err
	case <-ctx.Done():
		t.Forget(tk)
		select {
		case reply := <-tk.C:
			return reply.Value, reply.Err
		default:
			var zero R
			return zero, ctx.Err()
		}
	}
}
