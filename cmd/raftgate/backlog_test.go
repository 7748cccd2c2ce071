package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/server/servertest"
	"github.com/raftgate/raftgate/test/freeport"
)

// `services show` prints a limited service's backlog, `invocations list`
// and `show` the limit that holds an invocation and its priority, and a
// bad x-raftgate-priority is refused: against a real in-process node.
func TestServiceBacklogCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	block := make(chan struct{})
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(svc.Close)
	t.Cleanup(func() { close(block) }) // before svc.Close, which waits for the calls
	_, cfgs := servertest.StartCluster(t, 1, freeport.Cmd, func(c *server.Config) { c.Partitions = 1 })
	adminURL, ingress := "http://"+cfgs[0].AdminAddr, "http://"+cfgs[0].IngressAddr

	if res := runCLI(t, "", "services", "add", "Slow", svc.URL, "--concurrency", "2", "--admin", adminURL); res.code != 0 {
		t.Fatalf("services add: %+v", res)
	}
	send := func(prio string) (int, string) {
		req, _ := http.NewRequest("POST", ingress+"/Slow/run/send", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if prio != "" {
			req.Header.Set("x-raftgate-priority", prio)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var v struct{ InvocationID string }
		_ = json.Unmarshal(body, &v)
		if v.InvocationID == "" {
			return resp.StatusCode, string(body)
		}
		return resp.StatusCode, v.InvocationID
	}
	if code, body := send("101"); code != http.StatusBadRequest || !strings.Contains(body, "x-raftgate-priority") {
		t.Fatalf("priority 101: %d %s", code, body)
	}
	for range 4 {
		if code, body := send(""); code != http.StatusAccepted {
			t.Fatalf("send: %d %s", code, body)
		}
	}
	code, urgent := send("7")
	if code != http.StatusAccepted {
		t.Fatalf("send with priority 7: %d %s", code, urgent)
	}

	var v admin.ServiceView
	testutil.WaitFor(t, 20*time.Second, "2 in flight and 3 waiting for the limit", func() bool {
		res := runCLI(t, "", "services", "show", "Slow", "--json", "--admin", adminURL)
		v = admin.ServiceView{}
		return res.code == 0 && json.Unmarshal([]byte(res.stdout), &v) == nil && v.Backlog != nil &&
			v.Backlog.InFlight == 2 && v.Backlog.WaitingForLimit == 3
	})
	if v.Backlog.WaitingForRetry != 0 || v.Backlog.Paused != 0 || v.Backlog.OldestWaitingAge == "" || v.Backlog.Truncated {
		t.Fatalf("backlog %+v", *v.Backlog)
	}
	res := runCLI(t, "", "services", "show", "Slow", "--admin", adminURL)
	for _, want := range []string{"in flight 2", "waiting for limit 3", "waiting for retry 0", "paused 0", "oldest waiting "} {
		if !strings.Contains(squeeze(res.stdout), want) {
			t.Fatalf("services show lacks %q:\n%s", want, res.stdout)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the waiting ones held by the service's concurrency", func() bool {
		res := runCLI(t, "", "invocations", "list", "--service", "Slow", "--admin", adminURL)
		return strings.Count(res.stdout, "service concurrency") == 3
	})
	res = runCLI(t, "", "invocations", "show", urgent, "--admin", adminURL)
	if s := squeeze(res.stdout); res.code != 0 || !strings.Contains(s, "priority 7") || !strings.Contains(s, "held by service concurrency") {
		t.Fatalf("invocations show: %+v", res)
	}
}

// squeeze collapses each line's runs of spaces (tabwriter padding) to one.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}
