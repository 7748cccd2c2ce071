package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/server/servertest"
	"github.com/raftgate/raftgate/test/freeport"
)

// TestCallIsOneDispatchRequest runs calls through every node of a real
// in-process cluster: each costs one dispatch request to its partition's
// leader (op "call"), no append and attach apart, and a resubmit with the
// same idempotency key answers the stored result without a new delivery.
func TestCallIsOneDispatchRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	_, cfgs := servertest.StartCluster(t, 3, freeport.Server, nil)
	var mu sync.Mutex
	deliveries := map[string]int{}
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		deliveries[r.Header.Get("x-restate-id")]++
		mu.Unlock()
		w.Header().Set("content-type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(svc.Close)
	if r := testutil.Do(t, http.MethodPut, "http://"+cfgs[0].AdminAddr+"/services/Echo", `{"url":"`+svc.URL+`"}`); r.Status/100 != 2 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	for i, cfg := range cfgs {
		ingress := "http://" + cfg.IngressAddr + "/Echo/echo"
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("node %d knows Echo", i+1), func() bool {
			return testutil.Do(t, http.MethodPost, ingress, `"warm"`).Status == http.StatusOK
		})
		before := server.DispatchCalls(t, cfg.AdminAddr)
		const calls = 8
		for n := range calls {
			payload := fmt.Sprintf(`"n%d-%d"`, i, n)
			if r := testutil.Do(t, http.MethodPost, ingress, payload); r.Status != http.StatusOK || string(r.Body) != payload {
				t.Fatalf("node %d call = %d %s, want 200 %s", i+1, r.Status, r.Body, payload)
			}
		}
		after := server.DispatchCalls(t, cfg.AdminAddr)
		if got := after["call"] - before["call"]; got != calls || after["append"] != before["append"] || after["attach"] != before["attach"] {
			t.Fatalf("node %d: %d calls made %v dispatch requests (before %v), want %d of op call and no append or attach",
				i+1, calls, after, before, calls)
		}
	}
	// An idempotent resubmit answers the stored result.
	ingress := "http://" + cfgs[1].IngressAddr + "/Echo/echo"
	first := testutil.Do(t, http.MethodPost, ingress, `"once"`, "idempotency-key", "k1")
	again := testutil.Do(t, http.MethodPost, "http://"+cfgs[2].IngressAddr+"/Echo/echo", `"once"`, "idempotency-key", "k1")
	id := first.Header.Get("x-restate-id")
	if first.Status != 200 || again.Status != 200 || string(again.Body) != `"once"` || again.Header.Get("x-restate-id") != id {
		t.Fatalf("call %d %s (%s), resubmit %d %s (%s)", first.Status, first.Body, id, again.Status, again.Body, again.Header.Get("x-restate-id"))
	}
	mu.Lock()
	defer mu.Unlock()
	if deliveries[id] != 1 {
		t.Fatalf("%d deliveries of the resubmitted invocation, want 1", deliveries[id])
	}
}
