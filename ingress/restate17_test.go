package ingress

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/invocation"
)

// sameAnswer fails unless two answers agree in status, body and the
// headers clients read.
func sameAnswer(t *testing.T, what string, old, new *httptest.ResponseRecorder) {
	t.Helper()
	if old.Code != new.Code || old.Body.String() != new.Body.String() {
		t.Fatalf("%s: old path %d %q, new path %d %q", what, old.Code, old.Body, new.Code, new.Body)
	}
	for _, h := range []string{"Content-Type", "X-Restate-Id", "X-Restate-Error-Source", "Idempotency-Expires"} {
		if old.Header().Get(h) != new.Header().Get(h) {
			t.Fatalf("%s: %s old %q, new %q", what, h, old.Header().Get(h), new.Header().Get(h))
		}
	}
}

// TestRestate17CallAndSend: every call and send form of Restate 1.7's
// paths answers as the older path does, and a scope travels with the
// invocation.
func TestRestate17CallAndSend(t *testing.T) {
	oldH, oldD := newTestHandler(t, keyedServices)
	newH, newD := newTestHandler(t, keyedServices)
	oldD.complete, newD.complete = echoResult, echoResult
	key := []string{"Idempotency-Key", "k1", "Content-Type", "application/json"}
	for _, tc := range []struct {
		old, new string
		headers  []string
		scope    string
	}{
		{"/Greeter/greet", "/restate/call/Greeter/greet", key, ""},
		{"/Greeter/greet/send", "/restate/send/Greeter/greet", key, ""},
		{"/Greeter/greet/send?delay=10s", "/restate/send/Greeter/greet?delay=10s", []string{"Idempotency-Key", "k2"}, ""},
		{"/Counter/c1/add", "/restate/call/Counter/c1/add", key, ""},
		{"/Counter/c1/add/send", "/restate/send/Counter/c1/add", key, ""},
		{"/Counter/c1/send", "/restate/call/Counter/c1/send", key, ""}, // the object's handler named send
		{"/Signup/w1/run/send", "/restate/send/Signup/w1/run", nil, ""},
		{"/Signup/w1/run", "/restate/call/Signup/w1/run", nil, ""}, // 409: already run
		{"/Greeter/hi", "/restate/scope/checkout/call/Greeter/hi", key, "checkout"},
		{"/Greeter/hi/send", "/restate/scope/checkout/send/Greeter/hi", key, "checkout"},
		{"/Counter/c2/add", "/restate/scope/checkout/call/Counter/c2/add", key, "checkout"},
		{"/Counter/c2/add/send", "/restate/scope/checkout/send/Counter/c2/add", key, "checkout"},
		{"/Nope/greet", "/restate/call/Nope/greet", nil, ""},                         // 404
		{"/Counter/add", "/restate/call/Counter/add", nil, ""},                       // 400: no key
		{"/Greeter/greet?delay=1s", "/restate/call/Greeter/greet?delay=1s", nil, ""}, // 400
	} {
		o := do(oldH, "POST", tc.old, `{"n":1}`, tc.headers...)
		n := do(newH, "POST", tc.new, `{"n":1}`, tc.headers...)
		if strings.Contains(tc.old, "/Nope/") || strings.Contains(tc.old, "/Counter/add") || strings.Contains(tc.old, "delay=1s") {
			// Error messages name the path forms; status and source agree.
			if o.Code != n.Code || o.Header().Get("X-Restate-Error-Source") != n.Header().Get("X-Restate-Error-Source") {
				t.Fatalf("%s: old %d %s, new %d %s", tc.new, o.Code, o.Body, n.Code, n.Body)
			}
			continue
		}
		sameAnswer(t, tc.new, o, n)
		if got := newD.lastAppend(t).invoke.GetScope(); got != tc.scope && o.Code < 300 {
			t.Fatalf("%s: invoke scope %q, want %q", tc.new, got, tc.scope)
		}
	}
	if o := oldD.lastAppend(t).invoke.GetScope(); o != "" {
		t.Fatalf("an old path recorded scope %q", o)
	}
	// Without an idempotency key ids differ, but the answers' shape does not.
	n := do(newH, "POST", "/restate/send/Greeter/greet", "x")
	if n.Code != 202 || !strings.Contains(n.Body.String(), `"status":"Accepted"`) || n.Header().Get("X-Restate-Id") == "" {
		t.Fatalf("send without a key: %d %s", n.Code, n.Body)
	}
	for path, code := range map[string]int{
		"/restate/call/Greeter":                      400,
		"/restate/call/Greeter/a/b/c":                400,
		"/restate/scope/checkout/Greeter/greet":      400,
		"/restate/scope/bad%2Fscope/call/Greeter/hi": 400,
		"/restate/scope/checkout/call/Greeter":       400,
	} {
		decodeError(t, do(newH, "POST", path, "x"), code, "ingress")
	}
	decodeError(t, do(newH, "GET", "/restate/call/Greeter/greet", ""), 405, "ingress")
}

// TestRestate17AttachOutputLookup: attach and output by id and by target
// answer as the older paths; lookup names the invocation without waiting.
func TestRestate17AttachOutputLookup(t *testing.T) {
	h, fd := newTestHandler(t, keyedServices)
	pending := mustID(t, do(h, "POST", "/Greeter/slow/send", "p", "Idempotency-Key", "p1"))
	fd.complete = echoResult
	plain := mustID(t, do(h, "POST", "/Greeter/greet/send", "g", "Idempotency-Key", "k1"))
	keyed := mustID(t, do(h, "POST", "/Counter/c1/add/send", "c", "Idempotency-Key", "k1"))
	wf := mustID(t, do(h, "POST", "/Signup/w1/run/send", "w"))
	unknown := invocation.Random()

	type form struct {
		method, path, body string
	}
	target := func(verb, body string) form { return form{"POST", "/restate/" + verb, body} }
	byID := func(id invocation.ID) string { return `{"target":"invocation","invocationId":"` + id.String() + `"}` }
	for _, verb := range []string{"attach", "output"} {
		cases := []struct {
			old form
			new []form
		}{
			{form{"GET", "/restate/invocation/" + plain.String() + "/" + verb, ""},
				[]form{{"GET", "/restate/" + verb + "/" + plain.String(), ""}, target(verb, byID(plain))}},
			{form{"GET", "/restate/invocation/Greeter/greet/k1/" + verb, ""},
				[]form{target(verb, `{"target":"idempotentInvocation","service":"Greeter","handler":"greet","idempotencyKey":"k1","scope":"checkout"}`)}},
			{form{"GET", "/restate/invocation/Counter/c1/add/k1/" + verb, ""},
				[]form{{"GET", "/restate/" + verb + "/" + keyed.String(), ""},
					target(verb, `{"target":"idempotentInvocation","service":"Counter","key":"c1","handler":"add","idempotencyKey":"k1"}`)}},
			{form{"GET", "/restate/workflow/Signup/w1/" + verb, ""},
				[]form{{"GET", "/restate/" + verb + "/" + wf.String(), ""}, target(verb, `{"target":"workflow","workflowName":"Signup","workflowKey":"w1"}`)}},
			{form{"GET", "/restate/invocation/" + unknown.String() + "/" + verb, ""},
				[]form{{"GET", "/restate/" + verb + "/" + unknown.String(), ""}, target(verb, byID(unknown))}},
			{form{"GET", "/restate/invocation/inv_bad/" + verb, ""},
				[]form{{"GET", "/restate/" + verb + "/inv_bad", ""}, target(verb, `{"target":"invocation","invocationId":"inv_bad"}`)}},
		}
		if verb == "output" { // attach would wait
			cases = append(cases, struct {
				old form
				new []form
			}{form{"GET", "/restate/invocation/" + pending.String() + "/output", ""},
				[]form{{"GET", "/restate/output/" + pending.String(), ""}, target(verb, byID(pending))}})
		}
		for _, c := range cases {
			o := do(h, c.old.method, c.old.path, c.old.body)
			for _, f := range c.new {
				sameAnswer(t, f.method+" "+f.path+" "+f.body, o, do(h, f.method, f.path, f.body))
			}
		}
	}

	for _, tc := range []struct {
		body string
		id   invocation.ID
	}{
		{byID(pending), pending}, // not completed: still found, at once
		{`{"target":"idempotentInvocation","service":"Greeter","handler":"greet","idempotencyKey":"k1"}`, plain},
		{`{"target":"idempotentInvocation","service":"Counter","key":"c1","handler":"add","idempotencyKey":"k1"}`, keyed},
		{`{"target":"workflow","workflowName":"Signup","workflowKey":"w1","scope":"s"}`, wf},
	} {
		w := do(h, "POST", "/restate/lookup", tc.body)
		if w.Code != 200 || w.Body.String() != `{"invocationId":"`+tc.id.String()+`"}` || mustID(t, w) != tc.id {
			t.Fatalf("lookup %s = %d %s", tc.body, w.Code, w.Body)
		}
	}
	decodeError(t, do(h, "POST", "/restate/lookup", byID(unknown)), 404, "ingress")
	for _, bad := range []string{
		``, `{`, `{"target":"nope"}`, `{"target":"invocation"}`, `{"target":"workflow","workflowName":"W"}`,
		`{"target":"idempotentInvocation","service":"S","handler":"h"}`, `{"target":"invocation","invocationId":"x","extra":1}`,
		`{"target":"workflow","workflowName":"W","workflowKey":"k","scope":"a/b"}`,
	} {
		decodeError(t, do(h, "POST", "/restate/lookup", bad), 400, "ingress")
	}
	decodeError(t, do(h, "GET", "/restate/lookup", ""), 405, "ingress")
	decodeError(t, do(h, "GET", "/restate/attach", ""), 405, "ingress")
	decodeError(t, do(h, "POST", "/restate/output/"+plain.String(), ""), 405, "ingress")
	decodeError(t, do(h, "POST", "/restate/lookup/"+plain.String(), ""), 400, "ingress")
}
