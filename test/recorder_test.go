package test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// recorder is the test service: it counts deliveries per invocation id
// (x-restate-id) and echoes its input as the result, so a test can check
// at-least-once delivery and that each result is the invocation's own.
type recorder struct {
	srv *httptest.Server
	// tagDeliveries makes each result {"in": <input>, "delivery": N}, N
	// counting deliveries of that invocation, so two executions of one
	// invocation produce different results and a test can tell which one
	// was recorded.
	tagDeliveries bool

	mu         sync.Mutex
	deliveries map[string]int    // invocation id -> deliveries
	bodies     map[string]string // invocation id -> body last seen
}

func newRecorder(t testing.TB) *recorder { return newRecorderTagging(t, false) }

func newRecorderTagging(t testing.TB, tagDeliveries bool) *recorder {
	r := &recorder{deliveries: map[string]int{}, bodies: map[string]string{}, tagDeliveries: tagDeliveries}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := req.Header.Get("x-restate-id")
	r.mu.Lock()
	r.deliveries[id]++
	r.bodies[id] = string(body)
	n := r.deliveries[id]
	r.mu.Unlock()
	w.Header().Set("content-type", "application/json")
	if r.tagDeliveries {
		fmt.Fprintf(w, `{"in":%s,"delivery":%d}`, body, n)
		return
	}
	w.Write(body)
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deliveries[id]
}

// stats returns the number of distinct invocations seen and the total
// number of deliveries.
func (r *recorder) stats() (distinct, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.deliveries {
		total += n
	}
	return len(r.deliveries), total
}
