package test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// curlAnswer is one answer curl printed.
type curlAnswer struct {
	status int
	header http.Header
	body   string
}

// runCurl runs curl with args (-i added) and parses its answer.
func runCurl(t *testing.T, args ...string) curlAnswer {
	t.Helper()
	out, err := exec.Command("curl", append([]string{"-sS", "-i", "--max-time", "30"}, args...)...).Output()
	if err != nil {
		t.Fatalf("curl %v: %v", args, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(out))), nil)
	if err != nil {
		t.Fatalf("curl %v printed %q: %v", args, out, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return curlAnswer{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// TestRestate17PathsWithCurl: over real processes and curl, Restate 1.7's
// paths answer as the older ones, a scope is recorded with the invocation,
// and scope rules change through any node with compare-and-swap.
func TestRestate17PathsWithCurl(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "body": string(b)})
	}))
	t.Cleanup(svc.Close)
	c := startCluster(t, clusterOpts{nodes: 3})
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	c.registerService(n1, "Greeter", svc.URL)
	if a := runCurl(t, "-X", "PUT", n1.adminURL()+"/services/Cart", "-d", `{"url":"`+svc.URL+`","kind":"object","shared":["get"]}`); a.status/100 != 2 {
		t.Fatalf("register Cart: %+v", a)
	}
	testutil.WaitFor(t, 10*time.Second, "node 2 sees Cart", func() bool {
		return runCurl(t, n2.adminURL()+"/services/Cart").status == 200
	})

	// Calls and sends: the same answers as the older paths.
	for _, p := range [][2]string{
		{"/Greeter/greet", "/restate/call/Greeter/greet"},
		{"/Cart/ann/get", "/restate/call/Cart/ann/get"},
		{"/Greeter/greet", "/restate/scope/checkout/call/Greeter/greet"},
	} {
		old := runCurl(t, "-X", "POST", n1.ingressURL()+p[0], "-H", "content-type: application/json", "-d", `{"n":1}`)
		new := runCurl(t, "-X", "POST", n2.ingressURL()+p[1], "-H", "content-type: application/json", "-d", `{"n":1}`)
		if old.status != 200 || new.status != old.status || new.body != old.body || new.header.Get("content-type") != old.header.Get("content-type") {
			t.Fatalf("%s answered %d %q, %s answered %d %q", p[0], old.status, old.body, p[1], new.status, new.body)
		}
	}
	send := runCurl(t, "-X", "POST", n2.ingressURL()+"/restate/scope/checkout/send/Cart/ann/add", "-H", "idempotency-key: o-17", "-d", `{"item":3}`)
	id := send.header.Get("x-restate-id")
	if send.status != 202 || !strings.Contains(send.body, `"status":"Accepted"`) || id == "" {
		t.Fatalf("scoped send: %+v", send)
	}
	again := runCurl(t, "-X", "POST", n3.ingressURL()+"/Cart/ann/add/send", "-H", "idempotency-key: o-17", "-d", `{"item":3}`)
	if again.status != 202 || !strings.Contains(again.body, `"PreviouslyAccepted"`) || again.header.Get("x-restate-id") != id {
		t.Fatalf("the same send on the old path: %+v", again)
	}

	// Attach and output, by id and by target, from every node.
	old := runCurl(t, n1.ingressURL()+"/restate/invocation/"+id+"/attach")
	if old.status != 200 || !strings.Contains(old.body, `"path":"/Cart/add"`) {
		t.Fatalf("old attach: %+v", old)
	}
	idem := `{"target":"idempotentInvocation","service":"Cart","key":"ann","handler":"add","idempotencyKey":"o-17","scope":"checkout"}`
	for _, a := range []curlAnswer{
		runCurl(t, n2.ingressURL()+"/restate/attach/"+id),
		runCurl(t, n3.ingressURL()+"/restate/output/"+id),
		runCurl(t, "-X", "POST", n1.ingressURL()+"/restate/attach", "-d", `{"target":"invocation","invocationId":"`+id+`"}`),
		runCurl(t, "-X", "POST", n2.ingressURL()+"/restate/output", "-d", idem),
		runCurl(t, n3.ingressURL()+"/restate/invocation/Cart/ann/add/o-17/output"),
	} {
		if a.status != old.status || a.body != old.body || a.header.Get("x-restate-id") != id {
			t.Fatalf("answer %d %q, want the old attach's %d %q", a.status, a.body, old.status, old.body)
		}
	}
	if a := runCurl(t, "-X", "POST", n3.ingressURL()+"/restate/lookup", "-d", idem); a.status != 200 || a.body != `{"invocationId":"`+id+`"}` {
		t.Fatalf("lookup: %+v", a)
	}
	if a := runCurl(t, "-X", "POST", n3.ingressURL()+"/restate/lookup", "-d", `{"target":"workflow","workflowName":"Cart"}`); a.status != 400 {
		t.Fatalf("lookup of a malformed target: %+v", a)
	}
	// The scope travels with the invocation.
	var detail struct{ Scope string }
	if a := runCurl(t, n3.adminURL()+"/invocations/"+id); a.status != 200 || json.Unmarshal([]byte(a.body), &detail) != nil || detail.Scope != "checkout" {
		t.Fatalf("invocation detail: %+v", a)
	}

	// Scope rules: any node takes a change, versions guard it.
	type rule struct {
		Pattern     string
		Concurrency uint32
		Enabled     bool
		Version     uint64
	}
	var created rule
	if a := runCurl(t, "-X", "PUT", n2.adminURL()+"/rules/checkout", "-d", `{"concurrency":2}`); a.status != 201 ||
		json.Unmarshal([]byte(a.body), &created) != nil || created != (rule{"checkout", 2, true, 1}) {
		t.Fatalf("create rule: %+v", a)
	}
	if a := runCurl(t, "-X", "PUT", n3.adminURL()+"/rules/checkout", "-d", `{"concurrency":5,"expectedVersion":0}`); a.status != 409 {
		t.Fatalf("a second create: %+v", a)
	}
	if a := runCurl(t, "-X", "PUT", n1.adminURL()+"/rules/%2A", "-d", `{"concurrency":9}`); a.status != 201 {
		t.Fatalf("create *: %+v", a)
	}
	var list struct{ Rules []rule }
	if a := runCurl(t, n3.adminURL()+"/rules"); a.status != 200 || json.Unmarshal([]byte(a.body), &list) != nil || len(list.Rules) != 2 ||
		list.Rules[0] != (rule{"*", 9, true, 1}) || list.Rules[1] != created {
		t.Fatalf("rules on node 3: %+v", a)
	}
	if a := runCurl(t, "-X", "DELETE", n1.adminURL()+"/rules/checkout?expectedVersion=2"); a.status != 409 {
		t.Fatalf("stale delete: %+v", a)
	}
	if a := runCurl(t, "-X", "DELETE", n1.adminURL()+"/rules/checkout?expectedVersion=1"); a.status != 204 {
		t.Fatalf("delete: %+v", a)
	}
}
