package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ack is one acknowledged invocation as a client saw it.
type ack struct {
	key, id, payload string
}

// history records what the load clients were told.
type history struct {
	mu       sync.Mutex
	acks     map[string]ack // idempotency key -> ack
	statuses map[int]int    // HTTP status -> count
	netErrs  int
}

func newHistory() *history {
	return &history{acks: map[string]ack{}, statuses: map[int]int{}}
}

func (h *history) record(status int) {
	h.mu.Lock()
	h.statuses[status]++
	h.mu.Unlock()
}

// sendResult is the JSON body of a 202 from /send.
type sendResult struct {
	InvocationID  string `json:"invocationId"`
	Status        string `json:"status"`
	ExecutionTime string `json:"executionTime"`
}

// sendUntilAcked sends payload with idempotency key through the nodes in
// turn, as a careful client would: on a retry-safe 503 or a connection
// error it retries the same key on the next node until the deadline.
// It returns the acknowledgement, or an error if none came.
func sendUntilAcked(ctx context.Context, c *cluster, h *history, start int, service, key, payload string) (ack, error) {
	body, _ := json.Marshal(payload)
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return ack{}, ctx.Err()
		}
		n := c.nodes[(start+attempt)%len(c.nodes)]
		reqCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		r, err := do(reqCtx, http.MethodPost, n.ingressURL()+"/"+service+"/echo/send", body,
			map[string]string{"idempotency-key": key})
		cancel()
		if err != nil {
			h.mu.Lock()
			h.netErrs++
			h.mu.Unlock()
			continue
		}
		h.record(r.status)
		switch r.status {
		case http.StatusAccepted:
			var sr sendResult
			if err := json.Unmarshal(r.body, &sr); err != nil {
				return ack{}, fmt.Errorf("bad 202 body %q: %v", r.body, err)
			}
			if r.header.Get("x-restate-id") != sr.InvocationID {
				return ack{}, fmt.Errorf("x-restate-id %q != body id %q", r.header.Get("x-restate-id"), sr.InvocationID)
			}
			a := ack{key: key, id: sr.InvocationID, payload: string(body)}
			h.mu.Lock()
			if prev, ok := h.acks[key]; ok && prev.id != a.id {
				h.mu.Unlock()
				return ack{}, fmt.Errorf("key %s mapped to two ids: %s and %s", key, prev.id, a.id)
			}
			h.acks[key] = a
			h.mu.Unlock()
			return a, nil
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			if r.header.Get("Retry-After") == "" {
				return ack{}, fmt.Errorf("%d without Retry-After: %s", r.status, r.body)
			}
			continue
		default:
			return ack{}, fmt.Errorf("unexpected %d: %s", r.status, r.body)
		}
	}
}

// runLoad runs clients that each send unique idempotent invocations until
// stop is closed. Any answer other than success or a retry-safe error fails
// the test.
func runLoad(t *testing.T, c *cluster, h *history, service string, clients int, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	var seq atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := seq.Add(1)
				key := fmt.Sprintf("load-%d", k)
				if _, err := sendUntilAcked(ctx, c, h, i, service, key, fmt.Sprintf("payload-%d", k)); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("client %d: %v", i, err)
					return
				}
			}
		}(i)
	}
	return func() { wg.Wait(); cancel() }
}

// checkEveryAckHasItsResult attaches to every acknowledged invocation
// (through the nodes in turn) and checks that it completed with exactly its
// own payload, and that the service saw it at least once.
func checkEveryAckHasItsResult(t *testing.T, c *cluster, h *history, rec *recorder) {
	t.Helper()
	h.mu.Lock()
	acks := make([]ack, 0, len(h.acks))
	for _, a := range h.acks {
		acks = append(acks, a)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var lost, wrong int
	for i, a := range acks {
		var r *response
		var err error
		for attempt := 0; ; attempt++ {
			n := c.nodes[(i+attempt)%len(c.nodes)]
			r, err = do(ctx, http.MethodGet, n.ingressURL()+"/restate/invocation/"+a.id+"/attach", nil, nil)
			if ctx.Err() != nil || (err == nil && r.status != http.StatusServiceUnavailable) {
				break
			}
		}
		switch {
		case err != nil:
			t.Errorf("attach %s: %v", a.id, err)
			lost++
		case r.status != http.StatusOK:
			t.Errorf("attach %s (key %s): %d %s", a.id, a.key, r.status, r.body)
			lost++
		case string(r.body) != a.payload:
			t.Errorf("attach %s: result %q, want its own payload %q", a.id, r.body, a.payload)
			wrong++
		case rec.count(a.id) < 1:
			t.Errorf("attach %s: completed but the service never saw it", a.id)
		}
	}
	distinct, total := rec.stats()
	t.Logf("acknowledged %d, lost %d, wrong %d; service saw %d invocations in %d deliveries; statuses %v; network errors %d",
		len(acks), lost, wrong, distinct, total, h.statuses, h.netErrs)
}
