package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftgate/raftgate/internal/backoff"
	"github.com/raftgate/raftgate/rpc"
)

// callGrace is how long a call's attempt still waits for the leader's
// answer after the caller's deadline: the leader stops waiting for the
// result at that deadline (timeout_ms) and answers that the invocation was
// appended.
const callGrace = 500 * time.Millisecond

// call sends one logical request, retrying as described in the package
// comment, and returns the answer (never an error answer: those come back
// as errors).
func (c *Client) call(ctx context.Context, op string, tmpl *rpc.DispatchRequest) (*rpc.DispatchResponse, error) {
	return c.callUntil(ctx, op, tmpl, time.Time{})
}

// callUntil is call that starts no retry after retryUntil (zero: no such
// bound).
func (c *Client) callUntil(ctx context.Context, op string, tmpl *rpc.DispatchRequest, retryUntil time.Time) (*rpc.DispatchResponse, error) {
	start := time.Now()
	resp, err := c.retry(ctx, op, tmpl, retryUntil)
	c.metrics.calls.get(op, resultLabel(err)).Inc()
	c.metrics.seconds.get(op, "").Observe(time.Since(start).Seconds())
	return resp, err
}

func (c *Client) retry(ctx context.Context, op string, tmpl *rpc.DispatchRequest, retryUntil time.Time) (*rpc.DispatchResponse, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	wait := op == opAttach || op == opCall // as long as ctx allows
	if _, ok := ctx.Deadline(); !ok && !wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.DefaultTimeout)
		defer cancel()
	}
	r := route{c: c, partition: tmpl.Partition}
	delay := backoff.Backoff{Base: c.cfg.BackoffBase, Max: c.cfg.BackoffMax}
	var lastErr error
	for {
		node := r.pick()
		resp, err := c.attempt(ctx, node, tmpl, wait, op == opCall)
		if err == nil {
			e := resp.GetError()
			if e == nil {
				return resp, nil
			}
			err = rpc.FromProto(e)
		}
		reason, retryable := retryReason(err)
		switch {
		case c.closed.Load():
			return nil, ErrClosed
		case ctx.Err() != nil && !isDefinitive(err):
			// Whatever failed (a retryable error, the context, or the
			// server's own timer for this deadline), the time is up.
			if retryable {
				lastErr = err
			}
			return nil, giveUp(ctx, tmpl.Partition, lastErr)
		case !retryable:
			return nil, err
		}
		lastErr = err
		if !retryUntil.IsZero() && time.Now().After(retryUntil) {
			return nil, fmt.Errorf("dispatch to partition %d: %w: no leader took the request in time (last error: %w)",
				tmpl.Partition, rpc.ErrUnavailable, lastErr)
		}
		c.metrics.retries.get(reason, "").Inc()
		var notLeader *rpc.NotLeaderError
		immediate := false
		if errors.As(err, &notLeader) {
			if notLeader.Leader != 0 && c.cfg.Resolver != nil {
				c.cfg.Resolver.Hint(tmpl.Partition, notLeader.Leader, notLeader.Term)
			}
			immediate = r.notLeader(node.id, notLeader.Leader)
		} else {
			r.failed(node.id)
		}
		if immediate {
			continue
		}
		r.redirects = 0
		t := time.NewTimer(delay.Next())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, giveUp(ctx, tmpl.Partition, lastErr)
		case <-c.ctx.Done():
			t.Stop()
			return nil, ErrClosed
		}
	}
}

// attempt sends the request once to node p, on a fresh correlation id, and
// waits for its answer, the stream breaking, or ctx.
//
// Only long waits (attach, call) carry the deadline to the server: other
// requests end with leadership anyway, and a server-side timer per request
// costs CPU. With grace, an answer is still awaited for callGrace after
// ctx's deadline.
func (c *Client) attempt(ctx context.Context, p *peer, tmpl *rpc.DispatchRequest, sendTimeout, grace bool) (*rpc.DispatchResponse, error) {
	if !p.tryAcquire() {
		c.metrics.overloads.Inc()
		return nil, fmt.Errorf("%w: %d requests in flight to node %d", rpc.ErrOverloaded, c.cfg.MaxInFlightPerNode, p.id)
	}
	defer p.release()
	if p.id == c.cfg.Self && c.cfg.Local != nil {
		return c.attemptLocal(ctx, tmpl)
	}
	st, err := p.stream(ctx)
	if err != nil {
		return nil, err
	}
	corr, answer, ok := st.register()
	if !ok {
		return nil, st.failure()
	}
	req := &rpc.DispatchRequest{
		CorrelationId: corr,
		RequestId:     tmpl.RequestId,
		Partition:     tmpl.Partition,
		Body:          tmpl.Body, // read-only from here on; shared by attempts
	}
	if sendTimeout {
		req.TimeoutMs = timeoutMillis(ctx)
	}
	// sendq holds MaxInFlightPerNode requests, more than can be in flight.
	select {
	case st.sendq <- req:
	case <-st.done:
		return nil, st.failure()
	case <-ctx.Done():
		st.abandon(corr)
		return nil, ctx.Err()
	}
	select {
	case resp := <-answer:
		return resp, nil
	case <-st.done:
		select {
		case resp := <-answer: // came in just before the break
			return resp, nil
		default:
			return nil, st.failure()
		}
	case <-ctx.Done():
		if grace && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			if resp, ok := lateAnswer(answer, st.done); ok {
				return resp, nil
			}
		}
		st.abandon(corr)
		return nil, ctx.Err()
	}
}

// lateAnswer waits up to callGrace for an answer on answer.
func lateAnswer(answer <-chan *rpc.DispatchResponse, broken <-chan struct{}) (*rpc.DispatchResponse, bool) {
	t := time.NewTimer(callGrace)
	defer t.Stop()
	select {
	case resp := <-answer:
		return resp, true
	case <-broken:
		return nil, false
	case <-t.C:
		return nil, false
	}
}

// attemptLocal runs the request on this node's own backend. Its context
// also ends when the client closes, as a stream's requests end when their
// stream breaks; the answer is then ErrClosed. The backend reads tmpl and
// does not keep it, as execute's callers on the server side rely on too.
func (c *Client) attemptLocal(ctx context.Context, tmpl *rpc.DispatchRequest) (*rpc.DispatchResponse, error) {
	c.metrics.local.Inc()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	resp := execute(ctx, c.cfg.Local, tmpl)
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	return resp, nil
}

// retryReason says whether err is worth another attempt, and why.
func retryReason(err error) (string, bool) {
	var notLeader *rpc.NotLeaderError
	switch {
	case errors.As(err, &notLeader):
		return "not_leader", true
	case errors.Is(err, rpc.ErrLostLeadership):
		return "lost_leadership", true
	case errors.Is(err, errStreamBroken):
		return "stream_broken", true
	case errors.Is(err, errUnreachable):
		return "unreachable", true
	default:
		return "", false
	}
}

// isDefinitive reports an answer about the request itself, returned to the
// caller even when its deadline passed meanwhile.
func isDefinitive(err error) bool {
	return errors.Is(err, rpc.ErrNotFound) || errors.Is(err, rpc.ErrNotReady) ||
		errors.Is(err, rpc.ErrInvalid) || errors.Is(err, rpc.ErrOverloaded) ||
		errors.Is(err, errUnexpectedAnswer)
}

// giveUp builds the error of a call whose ctx ended: the caller's
// cancellation as is, a deadline as rpc.ErrUnavailable wrapping the deadline
// and the last retryable failure.
func giveUp(ctx context.Context, partition uint32, lastErr error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	if lastErr == nil {
		return fmt.Errorf("dispatch to partition %d: %w: %w", partition, rpc.ErrUnavailable, ctx.Err())
	}
	return fmt.Errorf("dispatch to partition %d: %w: %w (last error: %w)", partition, rpc.ErrUnavailable, ctx.Err(), lastErr)
}

// timeoutMillis is what is left of ctx's deadline, rounded up, for the
// server to bound the request's work (0: no deadline).
func timeoutMillis(ctx context.Context) int64 {
	deadline, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	left := time.Until(deadline)
	if left <= 0 {
		return 1
	}
	return int64((left + time.Millisecond - 1) / time.Millisecond)
}

func resultLabel(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, rpc.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, rpc.ErrOverloaded):
		return "overloaded"
	case errors.Is(err, rpc.ErrNotFound):
		return "not_found"
	case errors.Is(err, rpc.ErrNotReady):
		return "not_ready"
	case errors.Is(err, rpc.ErrInvalid):
		return "invalid"
	default:
		return "error"
	}
}

// route chooses the node for each attempt of one call: the node a
// NOT_LEADER answer named, else the resolver's leader, else the nodes in
// turn; a node that just failed is avoided while there is another.
type route struct {
	c         *Client
	partition uint32
	// redirect is the node the last NOT_LEADER named, tried next.
	redirect uint64
	// avoid is the node the last attempt failed on.
	avoid uint64
	// next is the rotation position in c.order.
	next int
	// redirects counts immediate (no backoff) redirects since the last
	// backoff: one is allowed, so stale hints cannot make callers spin.
	redirects int
}

func (r *route) pick() *peer {
	set := r.c.set.Load()
	if id := r.redirect; id != 0 {
		r.redirect = 0
		if p, ok := set.get(id); ok {
			return p
		}
	}
	if res := r.c.cfg.Resolver; res != nil {
		if leader, _, ok := res.Leader(r.partition); ok && leader != r.avoid {
			if p, ok := set.get(leader); ok {
				return p
			}
		}
	}
	order := set.order
	for range order {
		id := order[r.next%len(order)]
		r.next++
		if id != r.avoid {
			return set.byID[id]
		}
	}
	return set.byID[order[0]] // a single node, which just failed
}

// notLeader records a NOT_LEADER answer from node naming leader (0: none
// known) and reports whether to retry at once.
func (r *route) notLeader(node, leader uint64) bool {
	r.avoid = node
	if _, known := r.c.set.Load().get(leader); !known || leader == node {
		return false
	}
	r.redirect = leader
	if r.redirects > 0 {
		return false
	}
	r.redirects++
	return true
}

func (r *route) failed(node uint64) {
	r.avoid = node
	r.redirect = 0
}
