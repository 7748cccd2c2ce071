package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleKeysInBrowser drives what the console offers for virtual
// objects and workflows (issue 35, item 8): an object and a workflow are
// registered through the form with shared handlers and a retry policy; the
// invocation list and an invocation's page refresh by themselves; the
// object view shows a key's running and queued invocations; the list
// filters by object key; the workflow view shows its run.
func TestConsoleKeysInBrowser(t *testing.T) {
	s := newConsoleSession(t)
	c := startCluster(t, clusterOpts{nodes: 1})
	n := c.nodes[0]

	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "hold") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(svc.Close)
	service := func(name string) map[string]any {
		r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/services/"+name, nil, nil)
		if err != nil || r.status != http.StatusOK {
			return nil
		}
		var v map[string]any
		_ = json.Unmarshal(r.body, &v)
		return v
	}

	// Register an object (shared get, a retry policy) and a workflow.
	s.do("open the services page", chromedp.Navigate(n.adminURL()+"/ui/#/services"))
	s.waitPage(10*time.Second, "the services page", `!document.querySelector("#view-services").hidden`)
	s.do("register Counter as an object",
		chromedp.SendKeys(chromedp.CSS("#svc-name"), "Counter"),
		chromedp.SendKeys(chromedp.CSS("#svc-url"), svc.URL),
		chromedp.SetValue(chromedp.CSS("#svc-kind"), "object"),
		chromedp.SendKeys(chromedp.CSS("#svc-handlers"), "add, get"),
		chromedp.SendKeys(chromedp.CSS("#svc-shared"), "get"),
		chromedp.SendKeys(chromedp.CSS("#svc-max-attempts"), "3"),
		chromedp.SendKeys(chromedp.CSS("#svc-initial-backoff"), "200ms"),
		chromedp.Click(chromedp.CSS("#svc-submit")))
	s.waitPage(10*time.Second, "Counter listed as an object with its shared handler and retry policy", `(() => {
		const r = document.querySelector('#services tr[data-service="Counter"]');
		return r !== null && r.querySelector("[data-field=kind]").textContent === "object" &&
			r.querySelector("[data-field=shared]").textContent === "get" && r.querySelector("[data-field=retry]").textContent.startsWith("3× 200ms");
	})()`)
	v := service("Counter")
	retry, _ := v["retry"].(map[string]any)
	if v["kind"] != "object" || fmt.Sprint(v["shared"]) != "[get]" || retry["maxAttempts"] != float64(3) || retry["initialBackoff"] != "200ms" {
		t.Fatalf("GET /services/Counter after the form: %v", v)
	}
	s.do("register Signup as a workflow",
		chromedp.SendKeys(chromedp.CSS("#svc-name"), "Signup"),
		chromedp.SendKeys(chromedp.CSS("#svc-url"), svc.URL),
		chromedp.SetValue(chromedp.CSS("#svc-kind"), "workflow"),
		chromedp.Click(chromedp.CSS("#svc-submit")))
	s.waitPage(10*time.Second, "Signup listed as a workflow",
		`document.querySelector('#services tr[data-service="Signup"] [data-field=kind]')?.textContent === "workflow"`)
	if v := service("Signup"); v["kind"] != "workflow" {
		t.Fatalf("GET /services/Signup after the form: %v", v)
	}

	// The list, open before anything is sent, shows new invocations by itself.
	s.do("list Counter's invocations", chromedp.Navigate(n.adminURL()+"/ui/#/invocations?service=Counter"))
	s.waitPage(10*time.Second, "an empty list", `document.querySelector("#invocations tbody").textContent.includes("no invocations match")`)
	send := func(path, body string) string {
		t.Helper()
		r, err := do(context.Background(), http.MethodPost, n.ingressURL()+path, []byte(body), nil)
		if err != nil || r.status != http.StatusAccepted {
			t.Fatalf("POST %s: %v %+v", path, err, r)
		}
		return r.header.Get("x-restate-id")
	}
	var alice []string
	for i := range 3 {
		alice = append(alice, send("/Counter/alice/add/send", fmt.Sprintf(`{"hold":%d}`, i)))
	}
	s.waitPage(10*time.Second, "the three sends listed without a reload",
		`document.querySelectorAll("#invocations tbody tr[data-id]").length === 3`)

	// The object view: one running, two queued behind it.
	s.do("open alice", chromedp.Navigate(n.adminURL()+"/ui/#/objects/Counter/alice"))
	s.waitPage(10*time.Second, "alice running the first add with two queued", fmt.Sprintf(`(() => {
		const d = document.querySelector("#key-detail");
		return !document.querySelector("#view-key").hidden && d.querySelector("[data-field=running] a")?.dataset.id === %s &&
			d.querySelector("[data-field=queued]").textContent === "2" &&
			document.querySelectorAll("#key-invocations tbody tr[data-id]").length === 3;
	})()`, jsString(alice[0])))

	// An invocation's page follows it to completion.
	s.do("open the running add", chromedp.Navigate(n.adminURL()+"/ui/#/invocations/"+alice[0]))
	s.waitPage(10*time.Second, "it running", `document.querySelector("#inv-detail [data-status=running]") !== null`)
	releaseAll()
	s.waitPage(15*time.Second, "it completed without a reload", `document.querySelector("#inv-detail [data-status=completed]") !== null &&
		document.querySelector("#inv-detail [data-field=result-body]").textContent.includes("hold")`)
	s.do("open alice again", chromedp.Navigate(n.adminURL()+"/ui/#/objects/Counter/alice"))
	s.waitPage(15*time.Second, "alice idle", `document.querySelector("#key-detail [data-field=running]").textContent === "none" &&
		document.querySelector("#key-detail [data-field=queued]").textContent === "0"`)

	// The list filters by object key.
	bob := send("/Counter/bob/add/send", `{"n":1}`)
	s.do("filter by object key",
		chromedp.Navigate(n.adminURL()+"/ui/#/invocations"),
		chromedp.SendKeys(chromedp.CSS("#f-objkey"), "alice"),
		chromedp.Click(chromedp.CSS("#f-submit")))
	s.waitPage(10*time.Second, "only alice's three", fmt.Sprintf(`(() => {
		const ids = [...document.querySelectorAll("#invocations tbody tr[data-id]")].map(r => r.dataset.id);
		return location.hash.includes("objectKey=alice") && ids.length === 3 && !ids.includes(%s);
	})()`, jsString(bob)))

	// The workflow view, reached through the key form, shows the run.
	run := send("/Signup/bob/run/send", `{"email":"bob@example.com"}`)
	s.do("open Signup bob",
		chromedp.Navigate(n.adminURL()+"/ui/#/invocations"),
		chromedp.SendKeys(chromedp.CSS("#k-service"), "Signup"),
		chromedp.SendKeys(chromedp.CSS("#k-key"), "bob"),
		chromedp.Click(chromedp.CSS("#k-submit")))
	s.waitPage(15*time.Second, "the workflow's run completed", fmt.Sprintf(`(() => {
		const d = document.querySelector("#key-detail");
		return location.hash === "#/workflows/Signup/bob" && d.querySelector("[data-field=kind]").textContent === "Workflow" &&
			d.querySelector("[data-field=run] a")?.dataset.id === %s && d.querySelector("[data-field=run] [data-status=completed]") !== null;
	})()`, jsString(run)))
	s.screenshot("workflow")
}
