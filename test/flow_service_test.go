package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// flowService is the recording service of the flow-control tests: it
// measures from outside what a limit promises. Each call holds for a
// fixed time (the service's work, so that calls overlap), and the
// service records its own in-flight count (the peak), every arrival
// (time, path, invocation id) and the deliveries per invocation; it
// echoes its input.
type flowService struct {
	srv  *httptest.Server
	hold time.Duration

	mu sync.Mutex
	// gate, when set, holds every call until it is closed.
	gate       chan struct{}
	inflight   int
	peak       int
	arrivals   []arrival
	deliveries map[string]int    // invocation id -> deliveries
	inputs     map[string]string // invocation id -> body
}

// arrival is one call the service received.
type arrival struct {
	at   time.Time
	path string
	id   string
}

func newFlowService(t testing.TB, hold time.Duration) *flowService {
	s := &flowService{hold: hold, deliveries: map[string]int{}, inputs: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *flowService) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.Header.Get("x-restate-id")
	s.mu.Lock()
	s.inflight++
	s.peak = max(s.peak, s.inflight)
	s.arrivals = append(s.arrivals, arrival{at: time.Now(), path: r.URL.Path, id: id})
	s.deliveries[id]++
	s.inputs[id] = string(body)
	gate := s.gate
	s.mu.Unlock()
	// The work runs to its end even when the caller went away (a killed
	// leader), the stricter case for a concurrency limit.
	if gate != nil {
		<-gate
	}
	if s.hold > 0 {
		<-time.After(s.hold)
	}
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()
	w.Header().Set("content-type", "application/json")
	w.Write(body)
}

// seen returns the number of distinct invocations delivered so far.
func (s *flowService) seen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.deliveries)
}

// peakInFlight is the most calls the service ever had at once.
func (s *flowService) peakInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// arrived returns a copy of the arrivals so far, in arrival order.
func (s *flowService) arrived() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.arrivals...)
}

// registerFlow registers a service from a JSON registration through node
// 1's admin API and waits until every node shows it.
func (c *cluster) registerFlow(name, registration string) {
	c.t.Helper()
	testutil.WaitFor(c.t, 20*time.Second, "registration of "+name, func() bool {
		r, err := do(context.Background(), http.MethodPut, c.nodes[0].adminURL()+"/services/"+name, []byte(registration), nil)
		return err == nil && r.status/100 == 2
	})
	for _, m := range c.nodes {
		testutil.WaitFor(c.t, 10*time.Second, fmt.Sprintf("node %d sees service %s", m.id, name), func() bool {
			r, err := do(context.Background(), http.MethodGet, m.adminURL()+"/services/"+name, nil, nil)
			return err == nil && r.status == http.StatusOK
		})
	}
}

// sendAll sends n requests to the ingress path path(i) through the nodes
// in turn, each with idempotency key key(i) and body {"i":i}, from a few
// clients that retry through the next node on a connection error, 503 or
// 429 (a careful client). It returns the invocation id of each send.
func sendAll(ctx context.Context, t testing.TB, c *cluster, n int, path, key func(i int) string) []string {
	t.Helper()
	ids := make([]string, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var header map[string]string
				if key != nil {
					header = map[string]string{"idempotency-key": key(i)}
				}
				r, err := postRaw(ctx, c, i, path(i), fmt.Sprintf(`{"i":%d}`, i), header)
				if err != nil {
					t.Errorf("send %d: %v", i, err)
					continue
				}
				if r.status != http.StatusAccepted {
					t.Errorf("send %d: %d %s", i, r.status, r.body)
					continue
				}
				ids[i] = r.header.Get("x-restate-id")
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return ids
}

// postRaw is postUntilAnswered with a body sent as it is.
func postRaw(ctx context.Context, c *cluster, start int, path, body string, header map[string]string) (*response, error) {
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n := c.nodes[(start+attempt)%len(c.nodes)]
		if !n.alive() {
			continue
		}
		reqCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		r, err := do(reqCtx, http.MethodPost, n.ingressURL()+path, []byte(body), header)
		cancel()
		if err != nil || r.status == http.StatusServiceUnavailable || r.status == http.StatusTooManyRequests {
			continue
		}
		return r, nil
	}
}

// checkExactlyOnce checks that ids are n distinct invocations and that
// each has one result, its own input echoed (attached by id through the
// live nodes), and that the service saw every one of them.
func checkExactlyOnce(ctx context.Context, t testing.TB, c *cluster, s *flowService, ids []string) {
	t.Helper()
	distinct := map[string]int{}
	for i, id := range ids {
		if id == "" {
			continue // the send failed, reported already
		}
		if j, dup := distinct[id]; dup {
			t.Errorf("sends %d and %d have one invocation id %s", j, i, id)
		}
		distinct[id] = i
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				want := fmt.Sprintf(`{"i":%d}`, i)
				for attempt := 0; ctx.Err() == nil; attempt++ {
					n := c.nodes[(i+attempt)%len(c.nodes)]
					if !n.alive() {
						continue
					}
					r, err := do(ctx, http.MethodGet, n.ingressURL()+"/restate/attach/"+ids[i], nil, nil)
					if err != nil || r.status == http.StatusServiceUnavailable || r.status == http.StatusTooManyRequests {
						continue
					}
					if r.status != http.StatusOK || string(r.body) != want {
						t.Errorf("invocation %d (%s): %d %s, want 200 %s", i, ids[i], r.status, r.body, want)
					}
					break
				}
			}
		}()
	}
	for i, id := range ids {
		if id != "" {
			next <- i
		}
	}
	close(next)
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, i := range distinct {
		if s.deliveries[id] == 0 {
			t.Errorf("invocation %d (%s) has a result but was never delivered", i, id)
		} else if got, want := s.inputs[id], fmt.Sprintf(`{"i":%d}`, i); got != want {
			t.Errorf("invocation %s was delivered %s, sent %s", id, got, want)
		}
	}
}

// maxInWindow returns the most arrivals within any window of length w
// (sliding over the arrival times, which must be in order).
func maxInWindow(as []arrival, w time.Duration) int {
	best, lo := 0, 0
	for hi := range as {
		for as[hi].at.Sub(as[lo].at) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// limitsJSON is a registration of url with extra fields.
func limitsJSON(url, extra string) string {
	b, _ := json.Marshal(url)
	return fmt.Sprintf(`{"url":%s,%s}`, b, extra)
}
