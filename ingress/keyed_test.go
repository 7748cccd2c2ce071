package ingress

import (
	"strings"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

func keyedServices(c *Config) {
	c.Services = fakeServices{
		"Greeter": {Name: "Greeter", Url: "http://127.0.0.1:1"},
		"Counter": {Name: "Counter", Url: "http://127.0.0.1:1", Kind: rpc.Service_OBJECT, Shared: []string{"get"}},
		"Signup":  {Name: "Signup", Url: "http://127.0.0.1:1", Kind: rpc.Service_WORKFLOW},
	}
}

// Object paths carry the key into the invocation, in the partition of
// (service, key); only exclusive handlers are marked so; a handler named
// send is an object's, not a send.
func TestObjectPaths(t *testing.T) {
	h, fd := newTestHandler(t, keyedServices)
	fd.complete = echoResult
	for _, tc := range []struct {
		path, handler string
		exclusive     bool
	}{
		{"/Counter/a%2Fb/add", "add", true},
		{"/Counter/a%2Fb/get", "get", false},
		{"/Counter/a%2Fb/send", "send", true},
	} {
		w := do(h, "POST", tc.path, "1", "Content-Type", "text/plain")
		if w.Code != 200 {
			t.Fatalf("%s: %d %s", tc.path, w.Code, w.Body)
		}
		id := mustID(t, w)
		a := fd.lastAppend(t)
		inv := a.invoke
		if inv.Key != "a/b" || inv.Handler != tc.handler || inv.Exclusive != tc.exclusive {
			t.Fatalf("%s: invoke key %q handler %q exclusive %v", tc.path, inv.Key, inv.Handler, inv.Exclusive)
		}
		if id.PartitionKey() != invocation.KeyedPartitionKey("Counter", "a/b") {
			t.Fatalf("%s: id not in the partition of its key", tc.path)
		}
	}
	w := do(h, "POST", "/Counter/k/add/send", "1", "Idempotency-Key", "i1")
	if w.Code != 202 || mustID(t, w) != invocation.IdempotentKeyed("Counter", "k", "add", "i1") {
		t.Fatalf("send with key: %d %s", w.Code, w.Body)
	}
	fd.complete = nil
	w = do(h, "GET", "/restate/invocation/Counter/k/add/i1/output", "")
	if w.Code != 200 || w.Body.String() != "1" {
		t.Fatalf("output by idempotency key: %d %s", w.Code, w.Body)
	}
	for path, code := range map[string]int{
		"/Counter/add":        400, // an object needs a key
		"/Greeter/k/greet":    400, // a plain service has none
		"/Greeter/greet/send": 202,
	} {
		if w := do(h, "POST", path, "1"); w.Code != code {
			t.Errorf("%s: %d %s, want %d", path, w.Code, w.Body, code)
		}
	}
}

// A workflow's run has one id per workflow id: a second send is
// PreviouslyAccepted, a second call 409, an idempotency key 400; shared
// handlers run alongside; attach and output go by workflow id.
func TestWorkflowPaths(t *testing.T) {
	h, fd := newTestHandler(t, keyedServices)
	run := invocation.WorkflowRun("Signup", "ann")
	w := do(h, "POST", "/Signup/ann/run/send", "go")
	if w.Code != 202 || mustID(t, w) != run || !strings.Contains(w.Body.String(), `"status":"Accepted"`) {
		t.Fatalf("first send: %d %s", w.Code, w.Body)
	}
	if !fd.lastAppend(t).invoke.Exclusive {
		t.Fatal("run not exclusive")
	}
	w = do(h, "POST", "/Signup/ann/run/send", "again")
	if w.Code != 202 || mustID(t, w) != run || !strings.Contains(w.Body.String(), `"status":"PreviouslyAccepted"`) {
		t.Fatalf("second send: %d %s", w.Code, w.Body)
	}
	w = do(h, "POST", "/Signup/ann/run", "again")
	if w.Code != 409 || mustID(t, w) != run {
		t.Fatalf("second call: %d %s", w.Code, w.Body)
	}
	if w := do(h, "POST", "/Signup/bob/run", "x", "Idempotency-Key", "k"); w.Code != 400 {
		t.Fatalf("run with idempotency key: %d %s", w.Code, w.Body)
	}
	if w := do(h, "GET", "/restate/workflow/Signup/ann/output", ""); w.Code != StatusNotReady {
		t.Fatalf("output before the result: %d %s", w.Code, w.Body)
	}
	fd.finish(run, &rpc.Result{Status: 200, Body: []byte("done")})
	for _, verb := range []string{"attach", "output"} {
		if w := do(h, "GET", "/restate/workflow/Signup/ann/"+verb, ""); w.Code != 200 || w.Body.String() != "done" {
			t.Fatalf("%s: %d %s", verb, w.Code, w.Body)
		}
	}
	fd.complete = echoResult
	w = do(h, "POST", "/Signup/ann/status", "?")
	if w.Code != 200 || fd.lastAppend(t).invoke.Exclusive || fd.lastAppend(t).invoke.Key != "ann" {
		t.Fatalf("shared handler: %d %s %+v", w.Code, w.Body, fd.lastAppend(t).invoke)
	}
}
