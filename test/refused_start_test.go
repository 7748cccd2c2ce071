package test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestRefusedStartAnswersCleanly: a node of a running cluster restarted
// with an empty data directory is refused (docs/operations.md, "Backup and
// restore"). While it lives, clients hammering its ingress over kept-alive
// connections get answers that say nothing was done, or a refused
// connection, never a reset one (which leaves a client unsure whether its
// request was taken); it accepts nothing; and its log names the way out
// (restore from a peer with raftgate backup) before it warns of anything
// else.
func TestRefusedStartAnswersCleanly(t *testing.T) {
	c := startEchoCluster(t)
	n3 := c.nodes[2]
	for i := range 50 {
		r, err := do(context.Background(), http.MethodPost, c.nodes[0].ingressURL()+"/Echo/echo/send", []byte(`"x"`),
			map[string]string{"idempotency-key": fmt.Sprintf("before-%d", i)})
		if err != nil || r.status != http.StatusAccepted {
			t.Fatalf("send %d: %v %+v", i, err, r)
		}
	}
	c.kill(n3)
	if err := os.RemoveAll(n3.dataDir); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(n3.logPath) // the log of its first life comes first
	if err != nil {
		t.Fatal(err)
	}
	c.start(n3)
	// Once the node is up (its admin API answers), hammer its ingress.
	testutil.WaitFor(t, 30*time.Second, "node 3's admin API to answer", func() bool {
		r, err := do(context.Background(), http.MethodGet, n3.adminURL()+"/healthz", nil, nil)
		return (err == nil && r.status == http.StatusOK) || !n3.alive()
	})

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var mu sync.Mutex
	answers := map[int]int{}
	var resets, accepted []string
	refusedConns := 0
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; n3.alive(); i++ {
				req, _ := http.NewRequest(http.MethodPost, n3.ingressURL()+"/Echo/echo/send", strings.NewReader(`"y"`))
				req.Header.Set("content-type", "application/json")
				req.Header.Set("idempotency-key", fmt.Sprintf("during-%d-%d", w, i))
				var reused bool
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
				}))
				resp, err := client.Do(req)
				mu.Lock()
				switch {
				case errors.Is(err, syscall.ECONNREFUSED):
					refusedConns++
				case err != nil && (errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "EOF")):
					resets = append(resets, fmt.Sprintf("%v (on a reused connection: %v)", err, reused))
				case err != nil:
				default:
					answers[resp.StatusCode]++
					if resp.StatusCode == http.StatusAccepted {
						accepted = append(accepted, req.Header.Get("idempotency-key"))
					}
					resp.Body.Close()
				}
				mu.Unlock()
			}
		})
	}
	select {
	case <-n3.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("node 3 with an empty data dir still runs after 60 s:\n%s", tail(n3.logPath, 30))
	}
	wg.Wait()
	t.Logf("answers from the refused node: %v; refused connections: %d; resets: %d", answers, refusedConns, len(resets))
	if refusedConns+len(resets)+len(answers) == 0 {
		t.Fatal("no request reached the node while it lived")
	}
	if len(resets) > 0 {
		t.Errorf("%d requests met a reset or dropped connection, first: %s", len(resets), resets[0])
	}
	if len(accepted) > 0 {
		t.Errorf("the refused node accepted %d invocations before it had checked its log (%v...)", len(accepted), accepted[0])
	}

	whole, err := os.ReadFile(n3.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := whole[before.Size():]
	way := strings.Index(string(log), "raftgate backup")
	if way < 0 {
		t.Fatalf("the refused node's log does not name the restore command:\n%s", tail(n3.logPath, 30))
	}
	for _, line := range strings.Split(string(log)[:way], "\n") {
		if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
			t.Errorf("before naming the way out, the log warns: %s", line)
		}
	}
}
