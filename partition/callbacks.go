package partition

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/raftgate/raftgate/callback"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// Outcomes of an applied CallbackAttempt, for the metric.
const (
	callbackDelivered = iota
	callbackRetry
	callbackFailed
	numCallbackOutcomes
)

var callbackOutcomeNames = [numCallbackOutcomes]string{"delivered", "retry", "failed"}

// queueCallback is finish's part for an invocation with a callback URL:
// the callback is queued, due at the completion, in the Apply that
// records the result (rec is changed, not stored).
func queueCallback(b *bolt.Bucket, rec *rpc.InvocationRecord, at int64, fx *effects) error {
	if rec.Invoke.CallbackUrl == "" {
		return nil
	}
	rec.Callback = &rpc.CallbackState{State: rpc.CallbackState_PENDING}
	if err := outbox.PutCallback(b, outbox.Entry{ID: rec.Invoke.InvocationId, Due: at}); err != nil {
		return err
	}
	fx.callbacksQueued = true
	return nil
}

// callbackDue is where a pending callback is queued: its retry time after
// a failed attempt, else the completion.
func callbackDue(rec *rpc.InvocationRecord) int64 {
	if cb := rec.GetCallback(); cb.GetAttempts() > 0 {
		return cb.RetryAtUnixMs
	}
	return rec.CompletedAtUnixMs
}

// callbackAttempt records one attempt of a callback: delivered, given up,
// or rescheduled. A report for a callback that is not pending, or of an
// attempt not above the recorded one, is an old leader's and ignored. When
// the record is gone (purged before its callback was delivered), the entry
// the proposer found is dropped. The invocation's result is never touched.
func (m *machine) callbackAttempt(b *bolt.Bucket, c *rpc.CallbackAttempt, fx *effects) error {
	rec, found, err := m.record(b, c.InvocationId)
	if err != nil {
		return err
	}
	if !found {
		removed, err := outbox.RemoveCallback(b, c.DueUnixMs, c.InvocationId)
		if removed {
			fx.callbackOutcomes[callbackFailed]++
			fx.callbacksDone = append(fx.callbacksDone, c.InvocationId)
		}
		return err
	}
	cb := rec.GetCallback()
	if rec.State != rpc.InvocationRecord_COMPLETED || cb.GetState() != rpc.CallbackState_PENDING || c.Attempt <= cb.Attempts {
		return nil
	}
	if _, err := outbox.RemoveCallback(b, callbackDue(rec), c.InvocationId); err != nil {
		return err
	}
	cb.Attempts = c.Attempt
	cb.LastError = c.Error
	cb.RetryAtUnixMs = 0
	switch {
	case c.Delivered:
		cb.State = rpc.CallbackState_DELIVERED
		fx.callbackOutcomes[callbackDelivered]++
	case c.GaveUp:
		cb.State = rpc.CallbackState_FAILED
		fx.callbackOutcomes[callbackFailed]++
	default:
		cb.RetryAtUnixMs = c.RetryAtUnixMs
		if err := outbox.PutCallback(b, outbox.Entry{ID: c.InvocationId, Due: c.RetryAtUnixMs, Attempts: c.Attempt}); err != nil {
			return err
		}
		fx.callbackOutcomes[callbackRetry]++
		fx.callbacksQueued = true
	}
	fx.callbacksDone = append(fx.callbacksDone, c.InvocationId)
	return m.storeRecord(b, rec)
}

// callbacks is the leader's deliverer of completion callbacks: it reads
// the callback queue (reserve, not pop), POSTs each due callback and
// proposes a CallbackAttempt with the outcome; the reservation ends when
// that command applies (or its proposal fails). A crash or a step-down
// leaves every entry queued, so the next leader POSTs it again:
// at-least-once, and the receiver de-duplicates on x-raftgate-callback-id.
// It shares nothing with the invoker: a failing callback URL never holds
// up an invocation.
type callbacks struct {
	p    *Processor
	cfg  CallbackConfig
	wake chan struct{} // cap 1

	mu sync.Mutex
	// reserved: callbacks being delivered, by invocation id, with the time
	// their outcome was proposed (zero while the POST is under way).
	reserved map[string]time.Time
	rnd      *rand.Rand // backoff jitter
}

// callbackScan bounds the queue entries one scan reads.
const callbackScan = 1024

// callbackStale is how long a reservation whose outcome was proposed may
// wait for its apply before the callback is POSTed again (an entry lost
// with no leadership change; a duplicate POST is allowed, a lost one not).
const callbackStale = 30 * time.Second

func newCallbacks(p *Processor) *callbacks {
	seed := rand.Uint64()
	if k := p.cfg.Knobs; k != nil && k.JitterSeed != 0 {
		seed = k.JitterSeed
	}
	return &callbacks{p: p, cfg: p.cfg.Callbacks, wake: make(chan struct{}, 1), reserved: make(map[string]time.Time),
		rnd: rand.New(rand.NewPCG(seed, uint64(p.cfg.Partition)+1))}
}

// applied ends the reservations of callbacks whose attempt applied and
// wakes the deliverer when one was queued (from Reveal).
func (cb *callbacks) applied(done [][]byte, queued bool) {
	if len(done) > 0 {
		cb.mu.Lock()
		for _, id := range done {
			delete(cb.reserved, string(id))
		}
		cb.mu.Unlock()
	}
	if len(done) > 0 || queued {
		cb.signal()
	}
}

func (cb *callbacks) signal() {
	select {
	case cb.wake <- struct{}{}:
	default:
	}
}

// run delivers callbacks until ctx ends (leadership lost), then waits for
// the POSTs it started.
func (cb *callbacks) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		cb.mu.Lock()
		clear(cb.reserved)
		cb.mu.Unlock()
	}()
	for cb.p.log.ReadIndex(ctx) != nil { // start from what earlier leaders committed
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(cb.scan(ctx, &wg))
		select {
		case <-ctx.Done():
			return
		case <-cb.wake:
		case <-timer.C:
		}
	}
}

// scan starts a POST for each due callback that is not reserved, up to
// cfg.Concurrency in flight, and returns how long to wait for the next.
func (cb *callbacks) scan(ctx context.Context, wg *sync.WaitGroup) time.Duration {
	now := cb.p.now()
	wait := time.Second
	var due []outbox.Entry
	cb.mu.Lock()
	for id, at := range cb.reserved {
		if !at.IsZero() && now.Sub(at) > callbackStale {
			delete(cb.reserved, id)
		}
	}
	room := cb.cfg.Concurrency - len(cb.reserved)
	cb.mu.Unlock()
	if room <= 0 {
		return wait // woken when one ends
	}
	n := 0
	err := cb.p.log.View(ctx, func(b *bolt.Bucket) error {
		return outbox.ScanCallbacks(b, func(e outbox.Entry) bool {
			n++
			if e.Due > now.UnixMilli() {
				wait = min(wait, time.Duration(e.Due-now.UnixMilli())*time.Millisecond)
				return false
			}
			due = append(due, e)
			return n < callbackScan
		})
	})
	if err != nil {
		cb.p.logger.Warn().Err(err).Msg("callbacks: reading the queue failed")
		return time.Second
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	for _, e := range due {
		if room == 0 {
			break
		}
		if _, ok := cb.reserved[string(e.ID)]; ok {
			continue
		}
		cb.reserved[string(e.ID)] = time.Time{}
		room--
		wg.Add(1)
		go func() {
			defer wg.Done()
			cb.deliver(ctx, e)
		}()
	}
	return max(wait, time.Millisecond)
}

// deliver POSTs e's callback once and proposes the outcome.
func (cb *callbacks) deliver(ctx context.Context, e outbox.Entry) {
	var rec *rpc.InvocationRecord
	var res *rpc.InvocationResult
	err := cb.p.log.View(ctx, func(b *bolt.Bucket) error {
		var err error
		rec, res, err = readInvocation(b, e.ID)
		return err
	})
	if err != nil {
		cb.p.logger.Warn().Err(err).Msg("callbacks: reading the invocation failed")
		cb.release(e.ID)
		return
	}
	attempt := &rpc.CallbackAttempt{InvocationId: e.ID, DueUnixMs: e.Due, Attempt: e.Attempts + 1}
	switch {
	case rec == nil || res == nil:
		attempt.GaveUp, attempt.Error = true, "the invocation was purged before its callback was delivered"
	case rec.GetCallback().GetState() != rpc.CallbackState_PENDING || callbackDue(rec) != e.Due:
		cb.release(e.ID) // changed since the scan read the queue
		return
	default:
		attempt.Attempt = rec.Callback.Attempts + 1
		cb.post(ctx, rec, res, attempt)
	}
	if ctx.Err() != nil {
		cb.release(e.ID) // stepped down: the next leader POSTs it
		return
	}
	attempt.ProposedAtUnixMs = cb.p.now().UnixMilli()
	cb.p.submit(ctx, &rpc.Command{Cmd: &rpc.Command_CallbackAttempt{CallbackAttempt: attempt}}, func(err error) {
		if err != nil {
			cb.release(e.ID)
			return
		}
		cb.mu.Lock()
		if _, ok := cb.reserved[string(e.ID)]; ok {
			cb.reserved[string(e.ID)] = cb.p.now()
		}
		cb.mu.Unlock()
	})
}

// post makes one POST of rec's callback and sets a's outcome.
func (cb *callbacks) post(ctx context.Context, rec *rpc.InvocationRecord, res *rpc.InvocationResult, a *rpc.CallbackAttempt) {
	url := rec.Invoke.CallbackUrl
	if err := cb.cfg.Allow.Check(url); err != nil {
		// Allowed when the invocation was accepted; the operator changed
		// the list since (or this node's differs): do not call it.
		a.GaveUp, a.Error = true, err.Error()
		return
	}
	id, _ := invocation.IDFromBytes(rec.Invoke.InvocationId)
	r := res.GetResult()
	status := "succeeded"
	if r.GetFailed() {
		status = "failed"
	}
	body, err := json.Marshal(callback.Payload{
		InvocationID: id.String(), Status: status, Code: r.GetStatus(), IdempotencyKey: rec.Invoke.IdempotencyKey,
		Result: callback.ResultJSON(r.GetBody()), Error: r.GetError(),
	})
	if err != nil {
		a.GaveUp, a.Error = true, fmt.Sprintf("encoding the callback: %v", err)
		return
	}
	policy := cb.cfg.Retry
	cctx, cancel := context.WithTimeout(ctx, policy.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		a.GaveUp, a.Error = true, fmt.Sprintf("bad callback URL: %v", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(callback.HeaderID, id.String())
	if len(cb.cfg.Secret) > 0 {
		req.Header.Set(callback.HeaderSignature, callback.Sign(cb.cfg.Secret, body))
	}
	var retryAfter time.Duration
	resp, err := cb.p.client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
		resp.Body.Close()
		switch outbox.Classify(resp.StatusCode) {
		case outbox.Success:
			a.Delivered = true
			return
		case outbox.Terminal:
			a.GaveUp, a.Error = true, fmt.Sprintf("callback URL answered %d", resp.StatusCode)
			return
		}
		err = fmt.Errorf("callback URL answered %d", resp.StatusCode)
		retryAfter, _ = outbox.ParseRetryAfter(resp.Header.Get("Retry-After"), cb.p.now())
	} else if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("no answer within %v", policy.AttemptTimeout)
	}
	a.Error = err.Error()
	if policy.Exhausted(a.Attempt) {
		a.GaveUp = true
		return
	}
	cb.mu.Lock()
	delay := policy.Delay(a.Attempt, retryAfter, cb.rnd)
	cb.mu.Unlock()
	a.RetryAtUnixMs = cb.p.now().Add(delay).UnixMilli()
}

func (cb *callbacks) release(id []byte) {
	cb.mu.Lock()
	delete(cb.reserved, string(id))
	cb.mu.Unlock()
	cb.signal()
}
