package test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// callbackSink receives completion callbacks and checks each one's
// signature on its own (HMAC-SHA256 of the body, as a user would).
type callbackSink struct {
	srv    *httptest.Server
	secret string

	mu    sync.Mutex
	posts map[string]int               // x-raftgate-callback-id -> POSTs
	last  map[string]map[string]string // x-raftgate-callback-id -> payload (strings)
	bad   []string                     // POSTs with a bad signature or payload
}

func newCallbackSink(t *testing.T, secret string) *callbackSink {
	s := &callbackSink{secret: secret, posts: map[string]int{}, last: map[string]map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("x-raftgate-callback-id")
		mac := hmac.New(sha256.New, []byte(s.secret))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		var p map[string]any
		err := json.Unmarshal(body, &p)
		s.mu.Lock()
		defer s.mu.Unlock()
		if !hmac.Equal([]byte(r.Header.Get("x-raftgate-signature")), []byte(want)) || err != nil || p["invocationId"] != id {
			s.bad = append(s.bad, fmt.Sprintf("%s %s %q", id, r.Header.Get("x-raftgate-signature"), body))
		}
		s.posts[id]++
		s.last[id] = map[string]string{"status": fmt.Sprint(p["status"]), "code": fmt.Sprint(p["code"]),
			"idempotencyKey": fmt.Sprint(p["idempotencyKey"]), "result": fmt.Sprint(p["result"])}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// TestCallbacksAcrossLeaderKills sends 1,000 invocations with a
// completion callback while a partition leader is killed twice (the
// leader of partition 1, then of partition 2, the first node restarted in
// between): every accepted invocation's completion reaches the receiver
// at least once, signed with the cluster's secret, with its result and
// idempotency key; the admin API shows the callback delivered. A callback
// URL outside --callback-allow is refused at the ingress with 400.
func TestCallbacksAcrossLeaderKills(t *testing.T) {
	const secret, sends, kills = "cb-secret", 1000, 2
	sink := newCallbackSink(t, secret)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("content-type", "application/json")
		_, _ = fmt.Fprintf(w, `{"echo":%s}`, body)
	}))
	t.Cleanup(svc.Close)
	c := startCluster(t, clusterOpts{nodes: 3, partitions: 2, extraArgs: func(int) []string {
		return []string{"--callback-allow", sink.srv.URL, "--callback-secret", secret}
	}})
	c.registerService(c.nodes[0], "Echo", svc.URL)

	r, err := do(context.Background(), http.MethodPost, c.nodes[0].ingressURL()+"/Echo/run/send", []byte(`1`),
		map[string]string{"x-raftgate-callback": "http://127.0.0.1:1/elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "callback-allow") {
		t.Fatalf("callback outside the allow-list: %d %s, want 400", r.status, r.body)
	}

	// Senders retry through any node with the same idempotency key, so a
	// send whose node died is accepted once.
	var (
		mu       sync.Mutex
		accepted = map[string]string{} // invocation id -> idempotency key
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	// A kill at a third and at two thirds of the sends: a send past one
	// waits until it is done, so that each kill lands mid-stream.
	killSend, killed := make([]int64, kills), make([]chan struct{}, kills)
	for k := range kills {
		killSend[k], killed[k] = int64((k+1)*sends/(kills+1)), make(chan struct{})
	}
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > sends {
					return
				}
				for k, at := range killSend {
					if i > at {
						<-killed[k]
					}
				}
				key := fmt.Sprintf("k%d", i)
				hdr := map[string]string{"idempotency-key": key, "x-raftgate-callback": sink.srv.URL + "/done"}
				deadline := time.Now().Add(60 * time.Second)
				for attempt := w; time.Now().Before(deadline); attempt++ {
					n := c.nodes[attempt%len(c.nodes)]
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					r, err := do(ctx, http.MethodPost, n.ingressURL()+"/Echo/run/send", []byte(fmt.Sprint(i)), hdr)
					cancel()
					var ans struct {
						InvocationID string `json:"invocationId"`
					}
					if err == nil && r.status == http.StatusAccepted && json.Unmarshal(r.body, &ans) == nil {
						mu.Lock()
						accepted[ans.InvocationID] = key
						mu.Unlock()
						break
					}
				}
			}
		}()
	}
	var leader *node
	for k := range kills {
		testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("send %d", killSend[k]), func() bool { return next.Load() >= killSend[k] })
		p := uint32(1 + k%2)
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("a leader of partition %d", p), func() bool { leader = c.leaderOf(p); return leader != nil })
		t.Logf("kill %d at send %d: node %d, leader of partition %d", k+1, next.Load(), leader.id, p)
		c.kill(leader)
		close(killed[k])
		if k < kills-1 {
			// Down while a sixth of the sends go on, then back, so that
			// two of three nodes are up for the next kill.
			resumeAt := next.Load() + sends/6
			testutil.WaitFor(t, 60*time.Second, "sends under the new leader", func() bool { return next.Load() >= resumeAt })
			c.restart(leader)
		}
	}
	wg.Wait()
	c.restart(leader)
	if len(accepted) != sends {
		t.Fatalf("%d of %d sends accepted", len(accepted), sends)
	}

	missing := func() []string {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		var out []string
		for id := range accepted {
			if sink.posts[id] == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	testutil.WaitFor(t, 60*time.Second, "every completion's callback", func() bool { return len(missing()) == 0 })
	sink.mu.Lock()
	repeated := 0
	for id, key := range accepted {
		p := sink.last[id]
		if p["status"] != "succeeded" || p["code"] != "200" || p["idempotencyKey"] != key || !strings.HasPrefix(p["result"], "map[echo:") {
			t.Errorf("callback of %s: %v", id, p)
		}
		repeated += sink.posts[id] - 1
	}
	if len(sink.bad) > 0 {
		t.Errorf("%d callbacks with a bad signature or payload, e.g. %s", len(sink.bad), sink.bad[0])
	}
	sink.mu.Unlock()
	t.Logf("%d callbacks delivered, %d repeated (at-least-once)", len(accepted), repeated)

	var someID string
	for id := range accepted {
		someID = id
		break
	}
	testutil.WaitFor(t, 20*time.Second, "the admin API shows the callback delivered", func() bool {
		r, err := do(context.Background(), http.MethodGet, c.nodes[(leader.id)%3].adminURL()+"/invocations/"+someID, nil, nil)
		var view struct {
			Callback struct {
				State string `json:"state"`
				URL   string `json:"url"`
			} `json:"callback"`
		}
		return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &view) == nil &&
			view.Callback.State == "delivered" && view.Callback.URL == sink.srv.URL+"/done"
	})
}
