package test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestServiceRetryPolicy registers a service with its own retry policy on
// a node started with other --retry-* defaults: GET /services shows the
// policy in force, and the invoker gives up after the registration's
// attempts, not the cluster's.
func TestServiceRetryPolicy(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 1, extraArgs: func(int) []string {
		return []string{"--retry-max-attempts", "7", "--retry-initial-backoff", "5ms", "--retry-max-backoff", "20ms", "--retry-attempt-timeout", "7s"}
	}})
	n := c.nodes[0]
	var deliveries atomic.Int32
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deliveries.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(failing.Close)
	ctx := context.Background()

	body := `{"url":"` + failing.URL + `","retry":{"maxAttempts":3,"maxBackoff":"10ms","onMaxAttempts":"fail"}}`
	if r, err := do(ctx, http.MethodPut, n.adminURL()+"/services/Flaky", []byte(body), nil); err != nil || r.status != http.StatusCreated {
		t.Fatalf("PUT /services/Flaky: %v %+v", err, r)
	}
	r, err := do(ctx, http.MethodGet, n.adminURL()+"/services/Flaky", nil, nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /services/Flaky: %v %+v", err, r)
	}
	var view struct {
		Retry map[string]any `json:"retry"`
	}
	if err := json.Unmarshal(r.body, &view); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"maxAttempts": 3.0, "initialBackoff": "5ms", "maxBackoff": "10ms", "attemptTimeout": "7s"}
	for k, v := range want {
		if view.Retry[k] != v {
			t.Fatalf("policy in force %v, want %v", view.Retry, want)
		}
	}

	r, err = do(ctx, http.MethodPost, n.ingressURL()+"/Flaky/run", []byte(`{}`), nil)
	if err != nil || r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "gave up after 3 attempts") {
		t.Fatalf("call: %v %+v, want the service's 503 after 3 attempts", err, r)
	}
	if got := deliveries.Load(); got != 3 {
		t.Fatalf("%d deliveries, want the registration's 3", got)
	}
}
