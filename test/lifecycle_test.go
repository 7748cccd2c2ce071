package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/raftgate/raftgate/internal/testutil"
)

// switchable is a test service that answers 503 while down and echoes its
// input otherwise, recording every delivery's attempt headers.
type switchable struct {
	srv  *httptest.Server
	down atomic.Bool

	mu         sync.Mutex
	deliveries map[string]int  // invocation id -> deliveries
	attemptIDs map[string]bool // every x-raftgate-attempt-id seen, per invocation
	dupAttempt bool            // an attempt id seen twice
}

func newSwitchable(t *testing.T) *switchable {
	s := &switchable{deliveries: map[string]int{}, attemptIDs: map[string]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("x-restate-id")
		s.mu.Lock()
		s.deliveries[id]++
		key := id + "/" + r.Header.Get("x-raftgate-attempt-id")
		if s.attemptIDs[key] || r.Header.Get("x-raftgate-attempt-id") == "" {
			s.dupAttempt = true
		}
		s.attemptIDs[key] = true
		s.mu.Unlock()
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("content-type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *switchable) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries[id]
}

// invView is the part of GET /invocations/{id} these tests read.
type invView struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	Attempts      uint32 `json:"attempts"`
	LastError     string `json:"lastError"`
	Leader        uint64 `json:"leader"`
	RestartedAs   string `json:"restartedAs"`
	RestartedFrom string `json:"restartedFrom"`
	Result        *struct {
		Status uint32 `json:"status"`
		Failed bool   `json:"failed"`
		Error  string `json:"error"`
		Body   string `json:"body"`
	} `json:"result"`
}

func getJSON(t testing.TB, url string, v any) int {
	t.Helper()
	r, err := do(context.Background(), http.MethodGet, url, nil, nil)
	if err != nil {
		return 0
	}
	if r.status == http.StatusOK && json.Unmarshal(r.body, v) != nil {
		t.Fatalf("GET %s: %s", url, r.body)
	}
	return r.status
}

func postJSON(t testing.TB, url, body string, v any) int {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	r, err := do(context.Background(), http.MethodPost, url, b, nil)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	if v != nil && r.status/100 == 2 {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("POST %s: %s", url, r.body)
		}
	}
	return r.status
}

// send submits one invocation and returns its id.
func send(t *testing.T, n *node, path, body string, header map[string]string) string {
	t.Helper()
	var id string
	testutil.WaitFor(t, 10*time.Second, "send "+path, func() bool {
		r, err := do(context.Background(), http.MethodPost, n.ingressURL()+path+"/send", []byte(body), header)
		if err != nil || r.status != http.StatusAccepted {
			return false
		}
		id = r.header.Get("x-restate-id")
		return id != ""
	})
	return id
}

func waitStatus(t *testing.T, nodes []*node, id, status string) invView {
	t.Helper()
	var v invView
	testutil.WaitFor(t, 20*time.Second, id+" "+status, func() bool {
		for _, n := range nodes {
			if getJSON(t, n.adminURL()+"/invocations/"+id, &v) == http.StatusOK && v.Status == status {
				return true
			}
		}
		return false
	})
	return v
}

func register(t *testing.T, n *node, name, body string) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, "register "+name, func() bool {
		r, err := do(context.Background(), http.MethodPut, n.adminURL()+"/services/"+name, []byte(body), nil)
		return err == nil && r.status/100 == 2
	})
}

// An invocation whose retries are exhausted pauses (the default), shows
// paused with its last error in the status, the listing and the metric,
// stays paused across a kill of its partition's leader, and an operator's
// resume through another node delivers it to the end. No two deliveries
// carried the same attempt identity.
func TestPauseResumeAcrossLeaderChange(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: 1})
	svc := newSwitchable(t)
	svc.down.Store(true)
	register(t, c.nodes[0], "Flaky", `{"url":"`+svc.srv.URL+`","retry":{"maxAttempts":2,"initialBackoff":"5ms","maxBackoff":"10ms"}}`)
	id := send(t, c.nodes[0], "/Flaky/run", `{"n":1}`, nil)
	v := waitStatus(t, c.nodes, id, "paused")
	if v.Attempts != 2 || !strings.Contains(v.LastError, "paused after 2 attempts") {
		t.Fatalf("paused invocation %+v", v)
	}
	var list struct {
		Invocations []invView `json:"invocations"`
	}
	if getJSON(t, c.nodes[1].adminURL()+"/invocations?status=paused", &list) != http.StatusOK || len(list.Invocations) != 1 || list.Invocations[0].ID != id {
		t.Fatalf("paused listing %+v", list)
	}
	r, err := do(context.Background(), http.MethodGet, c.nodes[0].adminURL()+"/metrics", nil, nil)
	if err != nil || !strings.Contains(string(r.body), `raftgate_partition_invocations_paused{partition="1",service="Flaky"} 1`) {
		t.Fatalf("metrics lack the paused invocation: %v", err)
	}

	var leader *node
	for _, n := range c.nodes {
		if uint64(n.id) == v.Leader {
			leader = n
		}
	}
	if leader == nil {
		t.Fatalf("no leader in %+v", v)
	}
	c.kill(leader)
	var others []*node
	for _, n := range c.nodes {
		if n != leader {
			others = append(others, n)
		}
	}
	before := svc.count(id)
	v = waitStatus(t, others, id, "paused") // the new leader keeps it paused
	if svc.count(id) != before {
		t.Fatalf("a paused invocation was delivered again by the new leader")
	}
	svc.down.Store(false)
	testutil.WaitFor(t, 20*time.Second, "resume", func() bool {
		return postJSON(t, others[0].adminURL()+"/invocations/"+id+"/resume", "", nil) == http.StatusOK
	})
	v = waitStatus(t, others, id, "completed")
	if v.Result == nil || v.Result.Status != 200 || v.Attempts != 3 {
		t.Fatalf("resumed invocation %+v", v)
	}
	// Resuming a completed invocation is a conflict.
	if s := postJSON(t, others[0].adminURL()+"/invocations/"+id+"/resume", "", nil); s != http.StatusConflict {
		t.Fatalf("resume of a completed invocation: %d", s)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if svc.dupAttempt {
		t.Fatalf("two deliveries carried the same x-raftgate-attempt-id: %v", svc.attemptIDs)
	}
}

// Each per-invocation action end to end: resume to a new URL, restart
// (linked both ways, same input), kill, purge (its idempotency key is
// free again), and the refusals.
func TestInvocationActions(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 1})
	n := c.nodes[0]
	good := newSwitchable(t)
	bad := newSwitchable(t)
	bad.down.Store(true)
	register(t, n, "Svc", `{"url":"`+bad.srv.URL+`","retry":{"maxAttempts":1}}`)

	// resume --url: paused at the bad URL, delivered at the good one.
	a := send(t, n, "/Svc/run", `"a"`, nil)
	waitStatus(t, c.nodes, a, "paused")
	if s := postJSON(t, n.adminURL()+"/invocations/"+a+"/resume", `{"url":"`+good.srv.URL+`"}`, nil); s != http.StatusOK {
		t.Fatalf("resume: %d", s)
	}
	if v := waitStatus(t, c.nodes, a, "completed"); v.Result.Body != `"a"` || good.count(a) != 1 {
		t.Fatalf("resumed to the new URL: %+v, %d deliveries there", v, good.count(a))
	}

	// restart of a completed invocation: a new id, same input, linked.
	var nv invView
	if s := postJSON(t, n.adminURL()+"/invocations/"+a+"/restart", "", &nv); s != http.StatusOK || nv.ID == a || nv.RestartedFrom != a {
		t.Fatalf("restart: %d %+v", s, nv)
	}
	var old invView
	getJSON(t, n.adminURL()+"/invocations/"+a, &old)
	if old.RestartedAs != nv.ID {
		t.Fatalf("original links to %q, want %q", old.RestartedAs, nv.ID)
	}
	// The restarted one goes to the URL it was resumed with, too.
	if v := waitStatus(t, c.nodes, nv.ID, "completed"); v.Result.Body != `"a"` {
		t.Fatalf("restarted invocation %+v", v)
	}

	// kill a paused invocation; killing it again changes nothing, and
	// killing one completed otherwise is a conflict.
	k := send(t, n, "/Svc/run", `"k"`, nil)
	waitStatus(t, c.nodes, k, "paused")
	var kv invView
	if s := postJSON(t, n.adminURL()+"/invocations/"+k+"/kill", "", &kv); s != http.StatusOK || kv.Result == nil || kv.Result.Error != "killed" {
		t.Fatalf("kill: %d %+v", s, kv)
	}
	if s := postJSON(t, n.adminURL()+"/invocations/"+k+"/kill", "", nil); s != http.StatusOK {
		t.Fatalf("second kill: %d", s)
	}
	if s := postJSON(t, n.adminURL()+"/invocations/"+a+"/kill", "", nil); s != http.StatusConflict {
		t.Fatalf("kill of a completed invocation: %d", s)
	}

	// purge: refused while paused, then the key is free again.
	p := send(t, n, "/Svc/run", `"p"`, map[string]string{"idempotency-key": "order-1"})
	waitStatus(t, c.nodes, p, "paused")
	if s := postJSON(t, n.adminURL()+"/invocations/"+p+"/purge", "", nil); s != http.StatusConflict {
		t.Fatalf("purge of a paused invocation: %d", s)
	}
	postJSON(t, n.adminURL()+"/invocations/"+p+"/kill", "", nil)
	if s := postJSON(t, n.adminURL()+"/invocations/"+p+"/purge", "", nil); s != http.StatusOK {
		t.Fatalf("purge: %d", s)
	}
	if s := getJSON(t, n.adminURL()+"/invocations/"+p, &invView{}); s != http.StatusNotFound {
		t.Fatalf("purged invocation: %d", s)
	}
	r, err := do(context.Background(), http.MethodPost, n.ingressURL()+"/Svc/run/send", []byte(`"p"`), map[string]string{"idempotency-key": "order-1"})
	if err != nil || r.status != http.StatusAccepted || !strings.Contains(string(r.body), `"Accepted"`) {
		t.Fatalf("send with the purged key: %v %+v", err, r)
	}
	if s := postJSON(t, n.adminURL()+"/invocations/inv_nope/kill", "", nil); s != http.StatusBadRequest {
		t.Fatalf("kill of a malformed id: %d", s)
	}
}

// bulkOp is GET /operations/{op}.
type bulkOp struct {
	Done    bool    `json:"done"`
	Matched *uint64 `json:"matched"`
	Applied uint64  `json:"applied"`
	Scanned uint64  `json:"scanned"`
}

// A bulk cancel by filter, with a leader killed while it runs: it
// completes once, on exactly the invocations that matched when it was
// accepted; other services' invocations and those sent after it are
// untouched. Then bulk pause, resume and purge.
func TestBulkActionsAcrossLeaderKill(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: 2, extraArgs: func(int) []string { return []string{"--bulk-chunk", "4"} }})
	svc := newSwitchable(t)
	svc.down.Store(true)
	// Deliveries fail and wait an hour before the next: the invocations
	// stay pending for the test's length.
	for _, name := range []string{"X", "Y"} {
		register(t, c.nodes[0], name, `{"url":"`+svc.srv.URL+`","retry":{"maxAttempts":100,"initialBackoff":"1h","maxBackoff":"1h"}}`)
	}
	const nX, nY = 1200, 40
	ids := map[string][]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for range 16 {
		wg.Go(func() {
			for svcName := range work {
				id := send(t, c.nodes[0], "/"+svcName+"/run", `{}`, nil)
				mu.Lock()
				ids[svcName] = append(ids[svcName], id)
				mu.Unlock()
			}
		})
	}
	for i := range nX + nY {
		if i < nX {
			work <- "X"
		} else {
			work <- "Y"
		}
	}
	close(work)
	wg.Wait()

	admin := c.nodes[0].adminURL()
	var dry struct {
		Matched uint64 `json:"matched"`
	}
	if s := postJSON(t, admin+"/invocations/bulk", `{"action":"cancel","filter":{"service":"X","status":"pending"},"dryRun":true}`, &dry); s != http.StatusOK || dry.Matched != nX {
		t.Fatalf("dry run: %d, matched %d, want %d", s, dry.Matched, nX)
	}
	var started struct {
		Operation string `json:"operation"`
		Matched   uint64 `json:"matched"`
	}
	if s := postJSON(t, admin+"/invocations/bulk", `{"action":"cancel","filter":{"service":"X","status":"pending"}}`, &started); s != http.StatusOK || started.Matched != nX {
		t.Fatalf("bulk cancel: %d %+v", s, started)
	}
	late := send(t, c.nodes[0], "/X/run", `{"late":true}`, nil)

	// Kill a node leading a partition while the operation runs.
	var cl struct {
		Partitions []struct {
			ID     uint32 `json:"id"`
			Leader uint64 `json:"leader"`
		} `json:"partitions"`
	}
	getJSON(t, admin+"/cluster", &cl)
	var victim *node
	for _, p := range cl.Partitions {
		if p.ID == 1 && p.Leader != 0 {
			victim = c.nodes[p.Leader-1]
		}
	}
	if victim == nil {
		t.Fatalf("partition 1 has no leader: %+v", cl)
	}
	var op bulkOp
	getJSON(t, admin+"/operations/"+started.Operation, &op)
	if op.Done {
		t.Fatalf("operation done before the leader kill (%+v): make it longer", op)
	}
	c.kill(victim)
	var alive []*node
	for _, n := range c.nodes {
		if n != victim {
			alive = append(alive, n)
		}
	}
	admin = alive[0].adminURL()
	testutil.WaitFor(t, 60*time.Second, "bulk cancel done after the leader kill", func() bool {
		return getJSON(t, alive[0].adminURL()+"/operations/"+started.Operation, &op) == http.StatusOK && op.Done
	})
	if op.Applied != nX || op.Matched == nil || *op.Matched != nX {
		t.Fatalf("operation %+v, want %d applied", op, nX)
	}
	for _, id := range ids["X"] {
		var v invView
		if getJSON(t, alive[0].adminURL()+"/invocations/"+id, &v) != http.StatusOK || v.Result == nil || v.Result.Error != "cancelled" {
			t.Fatalf("X invocation %s: %+v", id, v)
		}
	}
	for _, id := range append([]string{late}, ids["Y"]...) {
		var v invView
		if getJSON(t, alive[0].adminURL()+"/invocations/"+id, &v) != http.StatusOK || v.Status == "completed" {
			t.Fatalf("untouched invocation %s: %+v", id, v)
		}
	}
	c.restart(victim)
	c.waitReady(victim, 30*time.Second)

	// Pause the Y's, resume them, then cancel and purge them by bulk.
	bulk := func(body string, want uint64) {
		t.Helper()
		var a struct {
			Operation string `json:"operation"`
			Matched   uint64 `json:"matched"`
		}
		testutil.WaitFor(t, 20*time.Second, "bulk "+body, func() bool {
			return postJSON(t, admin+"/invocations/bulk", body, &a) == http.StatusOK
		})
		testutil.WaitFor(t, 30*time.Second, "operation done", func() bool {
			return getJSON(t, admin+"/operations/"+a.Operation, &op) == http.StatusOK && op.Done
		})
		if a.Matched != want || op.Applied != want {
			t.Fatalf("%s: matched %d, applied %d, want %d", body, a.Matched, op.Applied, want)
		}
	}
	bulk(`{"action":"pause","filter":{"service":"Y"}}`, nY)
	waitStatus(t, c.nodes, ids["Y"][0], "paused")
	bulk(`{"action":"resume","filter":{"service":"Y","status":"paused"}}`, nY)
	bulk(`{"action":"kill","filter":{"service":"Y"}}`, nY)
	bulk(`{"action":"purge","filter":{"service":"Y","status":"completed"}}`, nY)
	if s := getJSON(t, admin+"/invocations/"+ids["Y"][0], &invView{}); s != http.StatusNotFound {
		t.Fatalf("purged: %d", s)
	}
	if s := getJSON(t, admin+"/operations/op_unknown", &op); s != http.StatusNotFound {
		t.Fatalf("unknown operation: %d", s)
	}
}

// The console's action buttons, each behind its confirmation: a paused
// invocation resumed from its page (the dialog alone changes nothing),
// then purged.
func TestConsoleInvocationActions(t *testing.T) {
	s := newConsoleSession(t)
	c := startCluster(t, clusterOpts{nodes: 1})
	n := c.nodes[0]
	svc := newSwitchable(t)
	svc.down.Store(true)
	register(t, n, "Svc", `{"url":"`+svc.srv.URL+`","retry":{"maxAttempts":1}}`)
	id := send(t, n, "/Svc/run", `"x"`, nil)
	waitStatus(t, c.nodes, id, "paused")

	s.do("open the paused invocation", chromedp.Navigate(n.adminURL()+"/ui/#/invocations/"+id))
	s.waitPage(10*time.Second, "paused, with resume, restart and kill but no purge",
		`document.querySelector("#inv-detail [data-status=paused]") !== null &&
		 !document.querySelector("[data-action=resume]").hidden && !document.querySelector("[data-action=restart]").hidden &&
		 !document.querySelector("[data-action=kill]").hidden && document.querySelector("[data-action=purge]").hidden`)
	s.do("ask to resume", chromedp.Click(chromedp.CSS("[data-action=resume]")))
	s.waitPage(5*time.Second, "the confirmation dialog", `document.querySelector("#confirm-action").open`)
	s.screenshot("resume")
	if v := waitStatus(t, c.nodes, id, "paused"); svc.count(id) != 1 {
		t.Fatalf("the dialog alone changed the invocation: %+v", v)
	}
	svc.down.Store(false)
	s.do("confirm", chromedp.Click(chromedp.CSS("#action-yes")))
	s.waitPage(10*time.Second, "completed on the page, with purge offered",
		`document.querySelector("#inv-detail [data-status=completed]") !== null && !document.querySelector("[data-action=purge]").hidden`)
	s.do("ask to purge", chromedp.Click(chromedp.CSS("[data-action=purge]")))
	s.waitPage(5*time.Second, "the confirmation dialog", `document.querySelector("#confirm-action").open`)
	s.do("confirm", chromedp.Click(chromedp.CSS("#action-yes")))
	testutil.WaitFor(t, 10*time.Second, "purged", func() bool {
		return getJSON(t, n.adminURL()+"/invocations/"+id, &invView{}) == http.StatusNotFound
	})
}

// An idempotency key reused with another body: 422 for a service
// registered with rejectReusedIdempotencyKeys, the first invocation
// (PreviouslyAccepted) for one without, as Restate.
func TestReusedIdempotencyKey(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 1})
	n := c.nodes[0]
	svc := newSwitchable(t)
	register(t, n, "Strict", `{"url":"`+svc.srv.URL+`","rejectReusedIdempotencyKeys":true}`)
	register(t, n, "Lax", `{"url":"`+svc.srv.URL+`"}`)
	key := map[string]string{"idempotency-key": "pay-1"}
	for _, name := range []string{"Strict", "Lax"} {
		send(t, n, "/"+name+"/run", `{"amount":10}`, key)
	}
	post := func(name, body string) *response {
		r, err := do(context.Background(), http.MethodPost, n.ingressURL()+"/"+name+"/run/send", []byte(body), key)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := post("Strict", `{"amount":99}`); r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "already used with another request body") {
		t.Fatalf("reused key, other body, strict service: %d %s", r.status, r.body)
	}
	if r := post("Strict", `{"amount":10}`); r.status != http.StatusAccepted || !strings.Contains(string(r.body), "PreviouslyAccepted") {
		t.Fatalf("reused key, same body: %d %s", r.status, r.body)
	}
	if r := post("Lax", `{"amount":99}`); r.status != http.StatusAccepted || !strings.Contains(string(r.body), "PreviouslyAccepted") {
		t.Fatalf("reused key, other body, default service: %d %s", r.status, r.body)
	}
}

// The command line: resume, restart, kill and purge one invocation, and a
// bulk action that waits and prints its progress and count.
func TestInvocationsCLI(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 1})
	n := c.nodes[0]
	svc := newSwitchable(t)
	svc.down.Store(true)
	register(t, n, "Svc", `{"url":"`+svc.srv.URL+`","retry":{"maxAttempts":1}}`)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append(args, "--admin", n.adminURL())...).CombinedOutput()
		if err != nil {
			t.Fatalf("raftgate %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var ids []string
	for i := range 3 {
		ids = append(ids, send(t, n, "/Svc/run", fmt.Sprintf(`%d`, i), nil))
	}
	for _, id := range ids {
		waitStatus(t, c.nodes, id, "paused")
	}
	if out := cli("invocations", "list", "--status", "paused"); strings.Count(out, "paused") != 3 {
		t.Fatalf("list --status paused:\n%s", out)
	}
	if out := cli("invocations", "kill", ids[0]); !strings.Contains(out, "kill "+ids[0]+": now completed") {
		t.Fatalf("kill:\n%s", out)
	}
	if out := cli("invocations", "bulk", "resume", "--status", "paused", "--dry-run"); !strings.Contains(out, "would apply to 2 invocations") {
		t.Fatalf("bulk --dry-run:\n%s", out)
	}
	svc.down.Store(false)
	if out := cli("invocations", "bulk", "resume", "--status", "paused", "--service", "Svc"); !strings.Contains(out, "resume of 2 invocations") ||
		!strings.Contains(out, "done: resume applied to 2 invocations") {
		t.Fatalf("bulk resume:\n%s", out)
	}
	waitStatus(t, c.nodes, ids[1], "completed")
	out := cli("invocations", "restart", ids[1])
	if !strings.HasPrefix(out, "restarted "+ids[1]+" as inv_") {
		t.Fatalf("restart:\n%s", out)
	}
	if out := cli("invocations", "purge", ids[0]); out != "purged "+ids[0]+"\n" {
		t.Fatalf("purge:\n%s", out)
	}
	if out := cli("invocations", "show", ids[1]); !strings.Contains(out, "restarted as") {
		t.Fatalf("show of a restarted invocation:\n%s", out)
	}
}
