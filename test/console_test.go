package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/raftgate/raftgate/internal/testutil"
)

// browserPath finds Chromium or Chrome: RAFTGATE_BROWSER, else the usual
// names on PATH (Debian's package `chromium` installs /usr/bin/chromium).
func browserPath() string {
	if p := os.Getenv("RAFTGATE_BROWSER"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// consoleSession is one headless browser tab on a node's console.
type consoleSession struct {
	t   *testing.T
	ctx context.Context
	// shots is where screenshots go (RAFTGATE_SCREENSHOTS), empty for none.
	shots string

	mu         sync.Mutex
	exceptions []string // uncaught JavaScript exceptions of the page
}

func newConsoleSession(t *testing.T) *consoleSession {
	t.Helper()
	browser := browserPath()
	if browser == "" {
		if os.Getenv("CI") == "" {
			t.Skip("no Chromium or Chrome found (install Debian's chromium package, or set RAFTGATE_BROWSER); skipping the browser test because CI is unset — in CI it must run")
		}
		t.Fatal("CI is set but no Chromium or Chrome was found (.ci/run installs Debian's chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1360, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first call starts the browser, which lives as long as the
	// context of that call: the tab's own, not a per-step timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	s := &consoleSession{t: t, ctx: ctx, shots: os.Getenv("RAFTGATE_SCREENSHOTS")}
	// An uncaught exception is a console bug even when the page looks right.
	thrown := chromedp.Events(ctx, cdpruntime.ExceptionThrown)
	go func() {
		for ev, err := range thrown {
			if err != nil {
				return // the tab closed
			}
			text := ev.ExceptionDetails.Text
			if exc := ev.ExceptionDetails.Exception; exc != nil {
				text += " " + exc.Description
			}
			s.mu.Lock()
			s.exceptions = append(s.exceptions, text)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range s.exceptions {
			t.Errorf("uncaught exception in the console: %s", e)
		}
	})
	if s.shots != "" {
		if err := os.MkdirAll(s.shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// do runs browser steps, failing the test with what was attempted.
func (s *consoleSession) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		s.t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](s *consoleSession, js string) T {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		s.t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return v
}

// waitPage polls a JavaScript condition, reporting what the page showed
// (the #error banner included) when it never held.
func (s *consoleSession) waitPage(timeout time.Duration, what, js string) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !eval[bool](s, js) {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %v waiting for the console to show %s\nerror banner: %q\npage text:\n%s", timeout, what,
				eval[string](s, `document.querySelector("#error").hidden ? "" : document.querySelector("#error").textContent`),
				eval[string](s, `document.body.innerText`))
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
	}
}

// acceptDialogs accepts every JavaScript dialog (confirm) from now on. The
// dialog blocks the click that opened it, so another goroutine answers.
func (s *consoleSession) acceptDialogs() {
	dialogs := chromedp.Events(s.ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return // the tab closed
			}
			_, _ = chromedp.Call(s.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
}

// screenshot saves the page as name.png when screenshots are on.
func (s *consoleSession) screenshot(name string) {
	s.t.Helper()
	if s.shots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(s.shots, name+".png"), png, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestConsoleInBrowser drives the operator console in headless Chromium
// against a three-node cluster with an admin token: the overview shows
// every node and a leader for every partition, a service is registered
// through the form and another removed, invocations submitted over HTTP
// are paged through (API and console) and found by id and by idempotency
// key, a delayed one is cancelled from its page (the API then
// reports it cancelled), the charts' totals agree with /metrics, and a
// wrong token is refused on screen.
func TestConsoleInBrowser(t *testing.T) {
	const token = "console-test-token"
	const partitions = 3
	s := newConsoleSession(t)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "fail") {
			http.Error(w, `{"error":"refused"}`, http.StatusBadRequest) // a terminal failure
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"greeting":"hello","input":%s}`, body)
	}))
	t.Cleanup(svc.Close)
	// The service's own origin takes the completion callbacks of the
	// registration the form makes.
	c := startCluster(t, clusterOpts{nodes: 3, partitions: partitions,
		extraArgs: func(int) []string { return []string{"--admin-token", token, "--callback-allow", svc.URL} }})
	n1 := c.nodes[0]
	auth := map[string]string{"Authorization": "Bearer " + token}

	// A wrong token: the shell loads, the API refuses, the page says so.
	s.do("open the console", chromedp.Navigate(n1.adminURL()+"/"))
	s.waitPage(10*time.Second, "the token form", `!document.querySelector("#token-form").hidden`)
	s.do("enter a wrong token",
		chromedp.SendKeys(chromedp.CSS("#token-input"), "wrong-token"),
		chromedp.Click(chromedp.CSS("#token-submit")))
	s.waitPage(10*time.Second, "the refusal of the wrong token",
		`!document.querySelector("#error").hidden && document.querySelector("#error").textContent.includes("401") &&
		 document.querySelector("#error").textContent.includes("wrong admin token") && !document.querySelector("#token-form").hidden`)
	if eval[int](s, `document.querySelectorAll("#nodes tbody tr").length`) != 0 {
		t.Fatal("node rows shown without a valid token")
	}
	s.screenshot("token")

	// The right token: the overview.
	s.do("enter the token",
		chromedp.SendKeys(chromedp.CSS("#token-input"), token),
		chromedp.Click(chromedp.CSS("#token-submit")))
	s.waitPage(15*time.Second, "three alive nodes and a leader for every partition", fmt.Sprintf(`(() => {
		const nodes = [...document.querySelectorAll("#nodes tbody tr")];
		const leaders = [...document.querySelectorAll("#partitions tbody tr td[data-field=leader]")];
		return nodes.length === 3 && nodes.every(r => r.querySelector("[data-field=alive]").textContent === "alive") &&
			leaders.length === %d && leaders.every(td => /^node [123]$/.test(td.textContent));
	})()`, partitions+1))
	for _, n := range c.nodes {
		if !eval[bool](s, fmt.Sprintf(`document.querySelector("#nodes").textContent.includes(%s)`, jsString(n.ingressAddr))) {
			t.Fatalf("overview does not show node %d's ingress address %s", n.id, n.ingressAddr)
		}
	}

	// Register a service through the form.
	s.do("open the services page", chromedp.Navigate(n1.adminURL()+"/ui/#/services"))
	s.waitPage(10*time.Second, "the services page", `!document.querySelector("#view-services").hidden`)
	s.do("fill and submit the registration form",
		chromedp.SendKeys(chromedp.CSS("#svc-name"), "Greeter"),
		chromedp.SendKeys(chromedp.CSS("#svc-url"), svc.URL),
		chromedp.SendKeys(chromedp.CSS("#svc-handlers"), "greet"),
		chromedp.SendKeys(chromedp.CSS("#svc-callback-url"), svc.URL+"/callback"),
		chromedp.Click(chromedp.CSS("#svc-submit")))
	s.waitPage(10*time.Second, "Greeter and its callback URL in the service list",
		fmt.Sprintf(`document.querySelector('#services tr[data-service="Greeter"] [data-field=callback]')?.textContent.includes(%s) === true`, jsString(svc.URL+"/callback")))
	for _, n := range c.nodes {
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("node %d knows Greeter", n.id), func() bool {
			r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/services/Greeter", nil, auth)
			return err == nil && r.status == http.StatusOK && strings.Contains(string(r.body), svc.URL+"/callback")
		})
	}
	s.screenshot("services")

	// Remove a service from its row, accepting the browser's confirmation.
	doomed, _ := json.Marshal(map[string]any{"url": svc.URL})
	if r, err := do(context.Background(), http.MethodPut, n1.adminURL()+"/services/Doomed", doomed, auth); err != nil || r.status/100 != 2 {
		t.Fatalf("register Doomed: %v %v", err, r)
	}
	s.waitPage(10*time.Second, "Doomed in the service list", `!!document.querySelector('#services tr[data-service="Doomed"]')`)
	s.acceptDialogs()
	s.do("remove Doomed", chromedp.Click(chromedp.CSS(`button[data-remove="Doomed"]`)))
	s.waitPage(10*time.Second, "Doomed gone, Greeter kept",
		`!document.querySelector('#services tr[data-service="Doomed"]') && !!document.querySelector('#services tr[data-service="Greeter"]')`)
	if r, err := do(context.Background(), http.MethodGet, n1.adminURL()+"/services/Doomed", nil, auth); err != nil || r.status != http.StatusNotFound {
		t.Fatalf("Doomed after removal: %v %v", err, r)
	}

	// A schedule through the form, bounded by a start and an end already
	// past: it shows ended.
	s.do("open the schedules page", chromedp.Navigate(n1.adminURL()+"/ui/#/schedules"))
	s.waitPage(10*time.Second, "the schedules page", `!document.querySelector("#view-schedules").hidden`)
	s.do("fill and submit the schedule form",
		chromedp.SendKeys(chromedp.CSS("#sch-id"), "bounded"),
		chromedp.SendKeys(chromedp.CSS("#sch-target"), "Greeter/greet"),
		chromedp.SendKeys(chromedp.CSS("#sch-every"), "R/PT1M"),
		chromedp.SendKeys(chromedp.CSS("#sch-start"), time.Now().Add(-48*time.Hour).UTC().Format(time.RFC3339)),
		chromedp.SendKeys(chromedp.CSS("#sch-end"), time.Now().Add(-24*time.Hour).UTC().Format(time.RFC3339)),
		chromedp.Click(chromedp.CSS("#sch-form button[type=submit]")))
	s.waitPage(10*time.Second, "the bounded schedule, ended",
		`document.querySelector('#schedules tr[data-schedule="bounded"] [data-field=state]')?.textContent === "ended"`)

	// Submit invocations over HTTP, through every node's ingress.
	send := func(n *node, key, query string) (string, error) {
		r, err := do(context.Background(), http.MethodPost, n.ingressURL()+"/Greeter/greet/send"+query,
			[]byte(fmt.Sprintf(`{"name":%s}`, jsString(key))), map[string]string{"idempotency-key": key})
		if err != nil {
			return "", fmt.Errorf("send %s: %w", key, err)
		}
		var a struct{ InvocationID string }
		if err := json.Unmarshal(r.body, &a); err != nil || r.status != http.StatusAccepted || a.InvocationID == "" {
			return "", fmt.Errorf("send %s: %d %s", key, r.status, r.body)
		}
		return a.InvocationID, nil
	}
	ids := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			key := "order-" + strconv.Itoa(i)
			id, err := send(c.nodes[i%3], key, "")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
			}
			ids[key] = id
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	delayed, err := send(c.nodes[1], "later", "?delay=1h")
	if err != nil {
		t.Fatal(err)
	}
	status := func(id string) map[string]any {
		r, err := do(context.Background(), http.MethodGet, n1.adminURL()+"/invocations/"+id, nil, auth)
		if err != nil || r.status != http.StatusOK {
			return nil
		}
		var v map[string]any
		_ = json.Unmarshal(r.body, &v)
		return v
	}
	for key, id := range ids {
		testutil.WaitFor(t, 20*time.Second, key+" completed", func() bool { return status(id)["status"] == "completed" })
	}

	// The overview's totals are /metrics' figures (31 accepted, 30 succeeded).
	s.do("open the overview", chromedp.Navigate(n1.adminURL()+"/ui/#/overview"))
	metricTotal := func(name, label string) int {
		r, err := do(context.Background(), http.MethodGet, n1.adminURL()+"/metrics", nil, auth)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("GET /metrics: %v %v", err, r)
		}
		total := 0.0
		for _, line := range strings.Split(string(r.body), "\n") {
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				total += v
			}
		}
		return int(total)
	}
	var accepted, succeeded int
	testutil.WaitFor(t, 10*time.Second, "node 1 applied every result", func() bool {
		accepted = metricTotal("raftgate_partition_invocations_accepted_total", "")
		succeeded = metricTotal("raftgate_partition_results_recorded_total", `outcome="succeeded"`)
		return accepted >= 31 && succeeded >= 30
	})
	s.waitPage(10*time.Second, fmt.Sprintf("totals accepted %d, succeeded %d as /metrics", accepted, succeeded), fmt.Sprintf(
		`document.querySelector("#total-accepted").textContent === "%d" && document.querySelector("#total-succeeded").textContent === "%d" &&
		 document.querySelectorAll("#chart-rates path").length > 0`, accepted, succeeded))
	// They are this process's counters, and the page says so, with the
	// start time /metrics gives (a restart starts them again at 0).
	r, err := do(context.Background(), http.MethodGet, n1.adminURL()+"/metrics", nil, auth)
	if err != nil {
		t.Fatal(err)
	}
	var startedAt float64
	for _, line := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, "process_start_time_seconds "); ok {
			startedAt, _ = strconv.ParseFloat(v, 64)
		}
	}
	if startedAt == 0 {
		t.Fatal("/metrics has no process_start_time_seconds")
	}
	s.waitPage(5*time.Second, "the totals labelled as this process's, with its start time", fmt.Sprintf(`(() => {
		const shown = document.querySelector("#node-started").textContent;
		const want = new Date(%d);
		return document.querySelector("#totals").textContent.includes("since its process started") &&
			document.querySelector("#totals").textContent.includes("Not the cluster's totals") &&
			shown.startsWith("at ") && shown.includes(String(want.getSeconds()).padStart(2, "0") + ".");
	})()`, int64(startedAt*1000)))

	// The API pages through all 31, newest first, with a cursor, from any
	// node (each partition answered by its leader).
	var paged []string
	var prevAccepted string
	cursor := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("GET /invocations?limit=7 never ended")
		}
		r, err := do(context.Background(), http.MethodGet, c.nodes[2].adminURL()+"/invocations?limit=7&cursor="+cursor, nil, auth)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("GET /invocations: %v %v", err, r)
		}
		var l struct {
			Invocations []struct{ ID, AcceptedAt string }
			NextCursor  string
		}
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Fatal(err)
		}
		for _, inv := range l.Invocations {
			if prevAccepted != "" && inv.AcceptedAt > prevAccepted {
				t.Fatalf("listing not newest first: %s after %s", inv.AcceptedAt, prevAccepted)
			}
			prevAccepted = inv.AcceptedAt
			paged = append(paged, inv.ID)
		}
		if cursor = l.NextCursor; cursor == "" {
			break
		}
	}
	want := map[string]bool{delayed: true}
	for _, id := range ids {
		want[id] = true
	}
	got := map[string]bool{}
	for _, id := range paged {
		got[id] = true
	}
	if len(paged) != len(want) || len(got) != len(want) {
		t.Fatalf("paged through %d invocations (%d distinct), want the %d submitted", len(paged), len(got), len(want))
	}
	for id := range want {
		if !got[id] {
			t.Fatalf("%s missing from the listing", id)
		}
	}

	// The console pages too: 10 per page, "Older" shows the next 10.
	s.do("list 10 per page", chromedp.Navigate(n1.adminURL()+"/ui/#/invocations?limit=10"))
	s.waitPage(10*time.Second, "a first page of 10 offering Older",
		`document.querySelectorAll("#invocations tbody tr[data-id]").length === 10 && !document.querySelector("#inv-next").hidden`)
	first := eval[string](s, `document.querySelector("#invocations tbody tr[data-id]").dataset.id`)
	s.do("older", chromedp.Click(chromedp.CSS("#inv-next")))
	s.waitPage(10*time.Second, "the second page", fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll("#invocations tbody tr[data-id]")];
		return rows.length === 10 && rows.every(r => r.dataset.id !== %s) && !document.querySelector("#inv-first").hidden;
	})()`, jsString(first)))

	// Find one by idempotency key through the filter form.
	s.do("open the invocations page", chromedp.Navigate(n1.adminURL()+"/ui/#/invocations"))
	s.waitPage(10*time.Second, "31 invocations listed", `document.querySelectorAll("#invocations tbody tr[data-id]").length === 31`)
	s.screenshot("invocations")
	s.do("filter by idempotency key",
		chromedp.SendKeys(chromedp.CSS("#f-key"), "order-7"),
		chromedp.Click(chromedp.CSS("#f-submit")))
	s.waitPage(10*time.Second, "only order-7", fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll("#invocations tbody tr[data-id]")];
		return rows.length === 1 && rows[0].dataset.id === %s;
	})()`, jsString(ids["order-7"])))

	// Find one by id, and see its detail.
	s.do("open by id",
		chromedp.Navigate(n1.adminURL()+"/ui/#/invocations"),
		chromedp.SendKeys(chromedp.CSS("#f-id"), ids["order-3"]),
		chromedp.Click(chromedp.CSS("#id-submit")))
	s.waitPage(10*time.Second, "order-3's detail", fmt.Sprintf(`(() => {
		const d = document.querySelector("#inv-detail");
		return !document.querySelector("#view-invocation").hidden && d.querySelector("[data-field=id]").textContent === %s &&
			d.querySelector("[data-status=completed]") !== null && d.querySelector("[data-field=result-body]").textContent.includes("order-3") &&
			d.querySelector("[data-field=request-body]").textContent.includes("order-3") && /leader: node [123]/.test(d.textContent);
	})()`, jsString(ids["order-3"])))
	s.screenshot("invocation")

	// Cancel the delayed one from its page, confirming in the dialog.
	s.do("open the delayed invocation", chromedp.Navigate(n1.adminURL()+"/ui/#/invocations/"+delayed))
	s.waitPage(10*time.Second, "the delayed invocation, pending, with a cancel button",
		`document.querySelector("#inv-detail [data-status=pending]") !== null && !document.querySelector("#cancel-btn").hidden`)
	s.do("ask to cancel", chromedp.Click(chromedp.CSS("#cancel-btn")))
	s.waitPage(5*time.Second, "the confirmation dialog", `document.querySelector("#confirm-cancel").open`)
	s.screenshot("cancel")
	if st := status(delayed); st["status"] != "pending" {
		t.Fatalf("the dialog alone changed the invocation: %v", st)
	}
	s.do("confirm", chromedp.Click(chromedp.CSS("#confirm-yes")))
	s.waitPage(10*time.Second, "the cancelled result on the page",
		`document.querySelector("#inv-detail [data-status=completed]") !== null && document.querySelector("#inv-detail").textContent.includes("409 failed: cancelled")`)
	st := status(delayed)
	res, _ := st["result"].(map[string]any)
	if st["status"] != "completed" || res["error"] != "cancelled" || res["status"] != float64(409) {
		t.Fatalf("API after cancelling from the console: %v", st)
	}

	if s.shots != "" {
		defer killAndWatch(t, s, c)
		loadForScreenshot(t, c, 25*time.Second)
		s.do("open the overview", chromedp.Navigate(n1.adminURL()+"/ui/#/overview"))
		s.waitPage(40*time.Second, "twenty seconds of chart", `series.accepted.length >= 20 && series.callP99.some(v => v !== null)`)
		s.screenshot("overview")
		return
	}
	killAndWatch(t, s, c)
}

// killAndWatch kills node 3 and waits for the overview to show its
// replicas down with their lag unknown (never "3: 18 / 0" or a max lag of
// 0) and the node suspect or down (issue 35, item 6).
func killAndWatch(t *testing.T, s *consoleSession, c *cluster) {
	c.kill(c.nodes[2])
	s.do("open the overview", chromedp.Navigate(c.nodes[0].adminURL()+"/ui/#/overview"))
	s.waitPage(30*time.Second, "node 3's replicas down with lag unknown", `(() => {
		const rows = [...document.querySelectorAll("#partitions tbody tr")];
		const alive = document.querySelector('#nodes tr[data-node="3"] [data-field=alive]');
		return rows.length > 0 && rows.every(r => {
			const reps = r.querySelector("[data-field=replicas]").textContent;
			return reps.includes("3: down (match ") && !/\b3: \d+ \/ /.test(reps) &&
				r.querySelector("[data-field=max-lag]").textContent === "unknown (node 3 down)";
		}) && alive !== null && ["suspect", "DOWN"].includes(alive.textContent);
	})()`)
	s.screenshot("node-down")
}

// loadForScreenshot keeps the cluster busy in the background for d (calls
// and sends through every node, one in ten failing) so that the overview's
// charts have something to show.
func loadForScreenshot(t *testing.T, c *cluster, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				n := c.nodes[(w+i)%len(c.nodes)]
				path := "/Greeter/greet"
				if w%2 == 0 {
					path += "/send"
				}
				body := fmt.Sprintf(`{"name":"load-%d-%d"}`, w, i)
				if i%10 == 9 {
					body = `{"name":"fail"}`
				}
				_, _ = do(ctx, http.MethodPost, n.ingressURL()+path, []byte(body), nil)
			}
		})
	}
}
