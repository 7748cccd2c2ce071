package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tsClientVersion is the version of Restate's TypeScript ingress client
// the test installs: the first with scopes (Restate 1.7).
const tsClientVersion = "1.17.2"

// TestFlowRestate17Forms covers the Restate 1.7 forms restate17_test.go
// does not, over plain HTTP: unscoped sends (plain and keyed) answer as
// the older paths, scoped calls of a key, workflows over the new paths,
// and POST attach|output|lookup with every target type; then Restate's
// TypeScript client over the older paths (unscoped) and the scoped ones.
func TestFlowRestate17Forms(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "body": string(b)})
	}))
	t.Cleanup(svc.Close)
	c := startCluster(t, clusterOpts{nodes: 3})
	c.registerService(c.nodes[0], "Greeter", svc.URL)
	c.registerFlow("Cart", limitsJSON(svc.URL, `"kind":"object","shared":["get"]`))
	c.registerFlow("Signup", limitsJSON(svc.URL, `"kind":"workflow"`))
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	post := func(n *node, path, body string, header map[string]string) *response {
		t.Helper()
		r, err := do(ctx, http.MethodPost, n.ingressURL()+path, []byte(body), header)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		return r
	}
	get := func(n *node, path string) *response {
		t.Helper()
		r, err := do(ctx, http.MethodGet, n.ingressURL()+path, nil, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return r
	}
	scopeOf := func(id string) string {
		t.Helper()
		r, err := do(ctx, http.MethodGet, n1.adminURL()+"/invocations/"+id, nil, nil)
		var v struct{ Scope string }
		if err != nil || r.status != http.StatusOK || json.Unmarshal(r.body, &v) != nil {
			t.Fatalf("invocation %s: %v %v", id, r, err)
		}
		return v.Scope
	}

	t.Run("http", func(t *testing.T) {
		// Unscoped sends, plain and keyed: the new path's send and the
		// old path's with the same idempotency key are one invocation.
		for _, p := range [][2]string{
			{"/restate/send/Greeter/greet", "/Greeter/greet/send"},
			{"/restate/send/Cart/bob/add", "/Cart/bob/add/send"},
		} {
			h := map[string]string{"idempotency-key": "k-" + p[0]}
			first, again := post(n1, p[0], `{"n":2}`, h), post(n2, p[1], `{"n":2}`, h)
			id := first.header.Get("x-restate-id")
			if first.status != 202 || !strings.Contains(string(first.body), `"status":"Accepted"`) || id == "" {
				t.Fatalf("%s: %d %s", p[0], first.status, first.body)
			}
			if again.status != 202 || !strings.Contains(string(again.body), `"PreviouslyAccepted"`) || again.header.Get("x-restate-id") != id {
				t.Fatalf("%s after %s: %d %s", p[1], p[0], again.status, again.body)
			}
			if s := scopeOf(id); s != "" {
				t.Errorf("%s recorded scope %q, want none", p[0], s)
			}
		}
		// A scoped send of a plain service and a scoped call of a key.
		send := post(n3, "/restate/scope/checkout/send/Greeter/greet", `{"n":3}`, nil)
		if send.status != 202 || scopeOf(send.header.Get("x-restate-id")) != "checkout" {
			t.Fatalf("scoped send: %d %s", send.status, send.body)
		}
		old, scoped := post(n1, "/Cart/bob/get", `{"n":4}`, nil), post(n2, "/restate/scope/checkout/call/Cart/bob/get", `{"n":4}`, nil)
		if old.status != 200 || scoped.status != 200 || string(scoped.body) != string(old.body) {
			t.Fatalf("scoped call of a key: %d %s, the old path %d %s", scoped.status, scoped.body, old.status, old.body)
		}
		if s := scopeOf(scoped.header.Get("x-restate-id")); s != "checkout" {
			t.Errorf("scoped call recorded scope %q", s)
		}

		// Workflows over the new paths: a send of run, then a call of
		// run (409 with the id), attach and output by id and by target.
		wf := post(n1, "/restate/scope/checkout/send/Signup/wf1/run", `{"email":"a@x"}`, nil)
		id := wf.header.Get("x-restate-id")
		if wf.status != 202 || id == "" {
			t.Fatalf("workflow send: %d %s", wf.status, wf.body)
		}
		if a := post(n2, "/restate/call/Signup/wf1/run", `{"email":"a@x"}`, nil); a.status != http.StatusConflict || a.header.Get("x-restate-id") != id {
			t.Fatalf("second run of a workflow: %d %s", a.status, a.body)
		}
		want := get(n1, "/restate/workflow/Signup/wf1/attach")
		if want.status != 200 || !strings.Contains(string(want.body), `"path":"/Signup/run"`) {
			t.Fatalf("old workflow attach: %d %s", want.status, want.body)
		}
		byWorkflow := `{"target":"workflow","workflowName":"Signup","workflowKey":"wf1","scope":"checkout"}`
		byInvocation := `{"target":"invocation","invocationId":"` + id + `"}`
		for i, a := range []*response{
			get(n2, "/restate/attach/"+id),
			get(n3, "/restate/output/"+id),
			post(n1, "/restate/attach", byWorkflow, nil),
			post(n2, "/restate/output", byWorkflow, nil),
			post(n3, "/restate/output", byInvocation, nil),
		} {
			if a.status != want.status || string(a.body) != string(want.body) || a.header.Get("x-restate-id") != id {
				t.Errorf("form %d answered %d %s, want %d %s", i, a.status, a.body, want.status, want.body)
			}
		}
		for _, target := range []string{byWorkflow, byInvocation} {
			if a := post(n1, "/restate/lookup", target, nil); a.status != 200 || string(a.body) != `{"invocationId":"`+id+`"}` || a.header.Get("x-restate-id") != id {
				t.Errorf("lookup %s: %d %s", target, a.status, a.body)
			}
		}
		// attach by idempotency key (the other form restate17_test.go
		// covers with output).
		h := map[string]string{"idempotency-key": "o-9"}
		sent := post(n1, "/restate/send/Cart/bob/add", `{"n":9}`, h)
		idem := `{"target":"idempotentInvocation","service":"Cart","key":"bob","handler":"add","idempotencyKey":"o-9"}`
		if a := post(n2, "/restate/attach", idem, nil); a.status != 200 || a.header.Get("x-restate-id") != sent.header.Get("x-restate-id") ||
			!strings.Contains(string(a.body), `"path":"/Cart/add"`) {
			t.Errorf("attach by idempotency key: %d %s", a.status, a.body)
		}
		if a := post(n3, "/restate/lookup", `{"target":"workflow","workflowName":"Signup","workflowKey":"nobody"}`, nil); a.status != 404 {
			t.Errorf("lookup of a workflow never started: %d %s", a.status, a.body)
		}
	})

	t.Run("typescript", func(t *testing.T) {
		dir := installTSClient(t)
		script := filepath.Join(dir, "drive.mjs")
		if err := os.WriteFile(script, []byte(tsDriver), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, "node", script)
		cmd.Env = append(os.Environ(), "INGRESS="+n2.ingressURL())
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("the TypeScript client: %v\n%s\n%s", err, out, stderr)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("the driver printed %s: %v", out, err)
		}
		wantPath := map[string]string{
			"call": "/Greeter/greet", "objectCall": "/Cart/get", "sendResult": "/Greeter/greet", "workflowAttach": "/Signup/run",
			"scopedCall": "/Greeter/greet", "scopedObjectCall": "/Cart/get", "scopedSendResult": "/Cart/add", "scopedWorkflowAttach": "/Signup/run",
		}
		for name, path := range wantPath {
			var v struct{ Path, Body string }
			if err := json.Unmarshal(got[name], &v); err != nil || v.Path != path || v.Body == "" {
				t.Errorf("%s: %s, want the service's answer for %s", name, got[name], path)
			}
		}
		for name, scope := range map[string]string{"sendId": "", "scopedSendId": "checkout", "scopedWorkflowId": "checkout"} {
			var id string
			if err := json.Unmarshal(got[name], &id); err != nil || id == "" {
				t.Fatalf("%s: %s", name, got[name])
			}
			if s := scopeOf(id); s != scope {
				t.Errorf("%s %s recorded scope %q, want %q", name, id, s, scope)
			}
		}
	})
}

// installTSClient installs Restate's TypeScript ingress client into the
// user's cache directory once and returns that directory; it skips the
// test when node or npm is missing or the install fails.
func installTSClient(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: Restate's TypeScript client needs node and npm", tool)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no cache directory for the TypeScript client: %v", err)
	}
	dir := filepath.Join(cache, "raftgate-test", "restate-sdk-clients-"+tsClientVersion)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@restatedev", "restate-sdk-clients", "package.json")); err == nil {
		return dir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cache directory for the TypeScript client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"@restatedev/restate-sdk-clients@"+tsClientVersion).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		t.Skipf("npm install @restatedev/restate-sdk-clients@%s failed (no registry?): %v\n%s", tsClientVersion, err, out)
	}
	return dir
}

// tsDriver drives raftgate with Restate's TypeScript client: unscoped
// (the older paths) and scoped (/restate/scope/…), and prints what it got
// as one JSON object.
const tsDriver = `
import { connect, rpc } from "@restatedev/restate-sdk-clients";
const ingress = connect({ url: process.env.INGRESS });
const out = {};
const Greeter = { name: "Greeter" }, Cart = { name: "Cart" }, Signup = { name: "Signup" };

out.call = await ingress.serviceClient(Greeter).greet({ n: 1 });
out.objectCall = await ingress.objectClient(Cart, "ann").get({ n: 2 });
const send = await ingress.serviceSendClient(Greeter).greet({ n: 3 }, rpc.sendOpts({ idempotencyKey: "ts-1" }));
out.sendId = send.invocationId;
out.sendResult = await ingress.result(send);
const wf = ingress.workflowClient(Signup, "ts-wf");
await wf.workflowSubmit({ email: "ts@x" });
out.workflowAttach = await wf.workflowAttach();

const scoped = ingress.scope("checkout");
out.scopedCall = await scoped.serviceClient(Greeter).greet({ n: 4 });
out.scopedObjectCall = await scoped.objectClient(Cart, "ann").get({ n: 5 });
const ssend = await scoped.objectSendClient(Cart, "ann").add({ n: 6 }, rpc.sendOpts({ idempotencyKey: "ts-2" }));
out.scopedSendId = ssend.invocationId;
out.scopedSendResult = await ingress.result(ssend);
const swf = scoped.workflowClient(Signup, "ts-swf");
out.scopedWorkflowId = (await swf.workflowSubmit({ email: "s@x" })).invocationId;
out.scopedWorkflowAttach = await swf.workflowAttach();
console.log(JSON.stringify(out));
`
