package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// decodeError checks that w is an error answer of the given status and
// source and returns its message.
func decodeError(t *testing.T, w *httptest.ResponseRecorder, code int, source string) string {
	t.Helper()
	if w.Code != code {
		t.Fatalf("status = %d, want %d; body %s", w.Code, code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content-type = %q, want application/json", ct)
	}
	if got := w.Header().Get("X-Restate-Error-Source"); got != source {
		t.Fatalf("x-restate-error-source = %q, want %q", got, source)
	}
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Source  string `json:"source"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", w.Body, err)
	}
	if e.Code != code || e.Source != source || e.Message == "" {
		t.Fatalf("error body = %+v, want code %d source %s and a message", e, code, source)
	}
	return e.Message
}

func mustID(t *testing.T, w *httptest.ResponseRecorder) invocation.ID {
	t.Helper()
	id, err := invocation.ParseID(w.Header().Get("X-Restate-Id"))
	if err != nil {
		t.Fatalf("x-restate-id %q: %v", w.Header().Get("X-Restate-Id"), err)
	}
	return id
}

func TestCallReturnsResult(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	fd.complete = func(inv *rpc.Invoke) *rpc.Result {
		return &rpc.Result{Status: 201, Body: []byte(`{"hello":"world"}`), ContentType: "application/json"}
	}
	w := do(h, "POST", "/Greeter/greet", `{"name":"ann"}`, "Content-Type", "application/json")
	if w.Code != 201 || w.Body.String() != `{"hello":"world"}` || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("answer = %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	id := mustID(t, w)
	a := fd.lastAppend(t)
	inv := a.invoke
	if string(inv.InvocationId) != string(id[:]) {
		t.Fatalf("appended id differs from x-restate-id")
	}
	if want := invocation.PartitionFor(id.PartitionKey(), 4); a.partition != want {
		t.Fatalf("partition = %d, want %d", a.partition, want)
	}
	if inv.Service != "Greeter" || inv.Handler != "greet" || string(inv.Body) != `{"name":"ann"}` ||
		inv.ContentType != "application/json" || len(inv.RequestId) != 16 || inv.IdempotencyKey != "" ||
		inv.ProposedAtUnixMs != 0 || inv.NotBeforeUnixMs != 0 || inv.DelayMs != nil {
		t.Fatalf("invoke = %+v", inv)
	}
	if w.Header().Get("Idempotency-Expires") != "" {
		t.Fatal("idempotency-expires without an idempotency key")
	}
	// A second call without key is a new invocation.
	w2 := do(h, "POST", "/Greeter/greet", `{}`, "Content-Type", "application/json")
	if mustID(t, w2) == id {
		t.Fatal("two calls without idempotency key got the same id")
	}
}

func TestCallWithIdempotencyKey(t *testing.T) {
	h, fd := newTestHandler(t, func(c *Config) { c.Retention = time.Hour })
	fd.complete = echoResult
	w := do(h, "POST", "/Greeter/greet", "hi", "Idempotency-Key", "k1", "Content-Type", "text/plain")
	if w.Code != 200 || w.Body.String() != "hi" || w.Header().Get("Content-Type") != "text/plain" {
		t.Fatalf("answer = %d %q", w.Code, w.Body)
	}
	id := mustID(t, w)
	if id != invocation.Idempotent("Greeter", "greet", "k1") {
		t.Fatal("id is not IdempotentID(service, handler, key)")
	}
	if want := testNow.Add(time.Hour).Format(time.RFC3339Nano); w.Header().Get("Idempotency-Expires") != want {
		t.Fatalf("idempotency-expires = %q, want %q", w.Header().Get("Idempotency-Expires"), want)
	}
	if fd.lastAppend(t).invoke.IdempotencyKey != "k1" {
		t.Fatal("idempotency key not in the invoke")
	}
	// The same key answers with the original invocation's result.
	w2 := do(h, "POST", "/Greeter/greet", "other body", "Idempotency-Key", "k1")
	if mustID(t, w2) != id || w2.Body.String() != "hi" {
		t.Fatalf("retry: id %s body %q, want the original", w2.Header().Get("X-Restate-Id"), w2.Body)
	}
}

func TestCallFailedResults(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	// The service answered 404 with its own body.
	fd.complete = func(*rpc.Invoke) *rpc.Result {
		return &rpc.Result{Status: 404, Body: []byte("no such user"), ContentType: "text/plain", Failed: true}
	}
	w := do(h, "POST", "/Greeter/greet", "")
	if w.Code != 404 || w.Body.String() != "no such user" || w.Header().Get("X-Restate-Error-Source") != "invocation" ||
		w.Header().Get("Content-Type") != "text/plain" {
		t.Fatalf("service failure answered %d %q %v", w.Code, w.Body, w.Header())
	}
	mustID(t, w)
	// raftgate gave up: JSON error with source invocation.
	fd.complete = func(*rpc.Invoke) *rpc.Result {
		return &rpc.Result{Status: 500, Failed: true, Error: "retries exhausted after 10 attempts: 503 from service"}
	}
	w = do(h, "POST", "/Greeter/greet", "")
	msg := decodeError(t, w, 500, "invocation")
	if !strings.Contains(msg, "retries exhausted") {
		t.Fatalf("message = %q", msg)
	}
	mustID(t, w)
	// Cancelled, status chosen by the cluster.
	fd.complete = func(*rpc.Invoke) *rpc.Result {
		return &rpc.Result{Status: 409, Failed: true, Error: "cancelled"}
	}
	decodeError(t, do(h, "POST", "/Greeter/greet", ""), 409, "invocation")
}

func TestSend(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	type sendBody struct {
		InvocationID  string `json:"invocationId"`
		Status        string `json:"status"`
		ExecutionTime string `json:"executionTime"`
	}
	send := func(target string, headers ...string) (sendBody, *httptest.ResponseRecorder) {
		t.Helper()
		w := do(h, "POST", target, `{"a":1}`, append([]string{"Content-Type", "application/json"}, headers...)...)
		if w.Code != 202 {
			t.Fatalf("%s: status %d, body %s", target, w.Code, w.Body)
		}
		var b sendBody
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
			t.Fatalf("body %q: %v", w.Body, err)
		}
		if b.InvocationID != w.Header().Get("X-Restate-Id") {
			t.Fatalf("invocationId %q != x-restate-id %q", b.InvocationID, w.Header().Get("X-Restate-Id"))
		}
		return b, w
	}
	b, _ := send("/Greeter/greet/send")
	if b.Status != "Accepted" || b.ExecutionTime != "" {
		t.Fatalf("send = %+v", b)
	}
	b1, _ := send("/Greeter/greet/send", "Idempotency-Key", "once")
	b2, _ := send("/Greeter/greet/send", "Idempotency-Key", "once")
	if b1.Status != "Accepted" || b2.Status != "PreviouslyAccepted" || b1.InvocationID != b2.InvocationID {
		t.Fatalf("sends with one key: %+v then %+v", b1, b2)
	}
	// Once completed, a send with the key reports when the result expires.
	id, _ := invocation.ParseID(b1.InvocationID)
	fd.finish(id, &rpc.Result{Status: 200})
	if _, w := send("/Greeter/greet/send", "Idempotency-Key", "once"); w.Header().Get("Idempotency-Expires") == "" {
		t.Fatal("send of a completed keyed invocation lacks idempotency-expires")
	}
	// Without a caller key a duplicate can only be the ingress's own retry.
	fd.appendHook = func(_ context.Context, _ uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
		return &rpc.Appended{InvocationId: inv.InvocationId, PreviouslyAccepted: true}, nil
	}
	if b, _ := send("/Greeter/greet/send"); b.Status != "Accepted" {
		t.Fatalf("send without key reported %s", b.Status)
	}
}

func TestSendDelay(t *testing.T) {
	for _, tc := range []struct {
		query string
		delay time.Duration
	}{
		{"delay=10s", 10 * time.Second},
		{"delay=PT10S", 10 * time.Second},
		{"delay=PT1H30M", 90 * time.Minute},
		{"delay=P1D", 24 * time.Hour},
		{"delay=1000ms", time.Second}, // what Restate's TypeScript client sends
		{"DELAY=1h30m", 90 * time.Minute},
		{"delay=1.5s", 1500 * time.Millisecond},
		{"delay=60+sec", time.Minute},
		{"delay=0s", 0}, // due at once, but still a delayed send: executionTime is now
	} {
		// The ingress's clock runs an hour ahead of the leader's (testNow):
		// the delay travels as a duration and the leader places it.
		h, fd := newTestHandler(t, func(cfg *Config) { cfg.Clock = func() time.Time { return testNow.Add(time.Hour) } })
		w := do(h, "POST", "/Greeter/greet/send?"+tc.query, "")
		if w.Code != 202 {
			t.Fatalf("%s: %d %s", tc.query, w.Code, w.Body)
		}
		want := testNow.Add(tc.delay)
		if inv := fd.lastAppend(t).invoke; inv.DelayMs == nil || *inv.DelayMs != tc.delay.Milliseconds() || inv.ProposedAtUnixMs != 0 {
			t.Fatalf("%s: delay_ms = %v, proposed_at = %d; want %d and 0", tc.query, inv.DelayMs, inv.ProposedAtUnixMs, tc.delay.Milliseconds())
		}
		var b struct {
			ExecutionTime string `json:"executionTime"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &b)
		et, err := time.Parse(time.RFC3339, b.ExecutionTime)
		if err != nil || !et.Equal(want) {
			t.Fatalf("%s: executionTime %q (%v), want %v", tc.query, b.ExecutionTime, err, want)
		}
	}
	h, _ := newTestHandler(t, nil)
	for _, q := range []string{"delay=", "delay=soon", "delay=-5s", "delay=10", "delay=P1M", "delay=PT", "delay=%zz", "delay=1s&delay=2s"} {
		msg := decodeError(t, do(h, "POST", "/Greeter/greet/send?"+q, ""), 400, "ingress")
		if !strings.Contains(msg, "delay") {
			t.Fatalf("%s: message %q does not name the delay", q, msg)
		}
	}
	msg := decodeError(t, do(h, "POST", "/Greeter/greet?delay=10s", ""), 400, "ingress")
	if !strings.Contains(msg, "send") {
		t.Fatalf("delay on a call: %q", msg)
	}
}

// completeAfterAttach completes the invocation once an Attach waits on it.
func completeAfterAttach(fd *fakeDispatcher, res *rpc.Result) {
	id := <-fd.attaching
	fd.finish(id, res)
}

func TestAttachAndOutput(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	w := do(h, "POST", "/Greeter/greet/send", "x", "Idempotency-Key", "k")
	id := mustID(t, w)

	// output before completion: 470.
	msg := decodeError(t, do(h, "GET", "/restate/invocation/"+id.String()+"/output", ""), 470, "ingress")
	if !strings.Contains(msg, "not completed") {
		t.Fatalf("470 message %q", msg)
	}
	// attach waits until the result exists.
	fd.attaching = make(chan invocation.ID, 1)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do(h, "GET", "/restate/invocation/"+id.String()+"/attach", "") }()
	completeAfterAttach(fd, &rpc.Result{Status: 200, Body: []byte("done"), ContentType: "text/plain"})
	w = <-done
	if w.Code != 200 || w.Body.String() != "done" || mustID(t, w) != id {
		t.Fatalf("attach = %d %q", w.Code, w.Body)
	}
	if w.Header().Get("Idempotency-Expires") == "" {
		t.Fatal("attach to a keyed invocation lacks idempotency-expires")
	}
	fd.attaching = nil
	for _, path := range []string{
		"/restate/invocation/" + id.String() + "/output",
		"/restate/invocation/" + strings.ToUpper(id.String()[4:]) + "/output", // no prefix: 400 below
		"/restate/invocation/Greeter/greet/k/output",
		"/restate/invocation/Greeter/greet/k/attach",
	} {
		w := do(h, "GET", path, "")
		if strings.Contains(path, "/"+strings.ToUpper(id.String()[4:])+"/") {
			decodeError(t, w, 400, "ingress")
			continue
		}
		if w.Code != 200 || w.Body.String() != "done" || mustID(t, w) != id {
			t.Fatalf("%s = %d %q", path, w.Code, w.Body)
		}
	}
	// Ids are case-insensitive.
	upper := "inv_" + strings.ToUpper(id.String()[4:])
	if w := do(h, "GET", "/restate/invocation/"+upper+"/output", ""); w.Code != 200 {
		t.Fatalf("upper-case id: %d %s", w.Code, w.Body)
	}
	// Unknown invocation (by id and by key): 404.
	unknown := invocation.Random().String()
	decodeError(t, do(h, "GET", "/restate/invocation/"+unknown+"/output", ""), 404, "ingress")
	decodeError(t, do(h, "GET", "/restate/invocation/"+unknown+"/attach", ""), 404, "ingress")
	decodeError(t, do(h, "GET", "/restate/invocation/Greeter/greet/nokey/attach", ""), 404, "ingress")
	// A key in the path is bounded as in the header: 400, not "not found".
	for _, kind := range []string{"attach", "output"} {
		msg := decodeError(t, do(h, "GET", "/restate/invocation/Greeter/greet/"+strings.Repeat("k", 4097)+"/"+kind, ""), 400, "ingress")
		if !strings.Contains(msg, "longer than 4096 bytes") {
			t.Fatalf("long key in the %s path: %q", kind, msg)
		}
	}
	// Malformed ids: 400 naming the id.
	for _, bad := range []string{"inv_", "inv_abc", "xyz", "inv_" + strings.Repeat("1", 39), id.String() + "a"} {
		msg := decodeError(t, do(h, "GET", "/restate/invocation/"+bad+"/attach", ""), 400, "ingress")
		if !strings.Contains(msg, "malformed invocation id") {
			t.Fatalf("%s: %q", bad, msg)
		}
	}
}

func TestClientTimeout(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	id := mustID(t, do(h, "POST", "/Greeter/greet/send", ""))
	for _, tc := range []struct{ target, header string }{
		{"/restate/invocation/" + id.String() + "/attach?timeout=20ms", ""},
		{"/restate/invocation/" + id.String() + "/attach", "PT0.02S"},
		{"/Greeter/greet?timeout=20ms", ""},
	} {
		var hdr []string
		if tc.header != "" {
			hdr = []string{"X-Raftgate-Timeout", tc.header}
		}
		w := do(h, http.MethodGet, tc.target, "", hdr...)
		if strings.HasPrefix(tc.target, "/Greeter") {
			w = do(h, http.MethodPost, tc.target, "", hdr...)
		}
		msg := decodeError(t, w, 470, "ingress")
		got := mustID(t, w)
		if !strings.Contains(msg, got.String()) {
			t.Fatalf("%s: message %q does not name the invocation", tc.target, msg)
		}
	}
	// Nothing changed: the invocation still completes and can be read.
	fd.finish(id, &rpc.Result{Status: 200, Body: []byte("late")})
	if w := do(h, "GET", "/restate/invocation/"+id.String()+"/output", ""); w.Code != 200 || w.Body.String() != "late" {
		t.Fatalf("after timeout: %d %q", w.Code, w.Body)
	}
	// DefaultCallTimeout applies without a client timeout.
	h2, _ := newTestHandler(t, func(c *Config) { c.DefaultCallTimeout = 20 * time.Millisecond })
	decodeError(t, do(h2, "POST", "/Greeter/greet", ""), 470, "ingress")
	// Bad timeouts.
	for _, target := range []string{"/Greeter/greet?timeout=abc", "/Greeter/greet?timeout=0s", "/Greeter/greet?timeout=-1s"} {
		msg := decodeError(t, do(h, "POST", target, ""), 400, "ingress")
		if !strings.Contains(msg, "timeout") {
			t.Fatalf("%s: %q", target, msg)
		}
	}
	decodeError(t, do(h, "POST", "/Greeter/greet", "", "X-Raftgate-Timeout", "x"), 400, "ingress")
}

func TestHealth(t *testing.T) {
	h, _ := newTestHandler(t, nil)
	if w := do(h, "GET", "/restate/health", ""); w.Code != 200 {
		t.Fatalf("health = %d", w.Code)
	}
	if w := do(h, "GET", "/restate/health/", ""); w.Code != 200 {
		t.Fatalf("health with trailing slash = %d", w.Code)
	}
	w := do(h, "POST", "/restate/health", "")
	decodeError(t, w, 405, "ingress")
	if w.Header().Get("Allow") != "GET, HEAD" {
		t.Fatalf("Allow = %q", w.Header().Get("Allow"))
	}
}

func TestRequestErrors(t *testing.T) {
	h, _ := newTestHandler(t, func(c *Config) { c.MaxBodyBytes = 16 })
	unknownService := decodeError(t, do(h, "POST", "/Nope/greet", ""), 404, "ingress")
	unknownHandler := decodeError(t, do(h, "POST", "/Strict/wave", ""), 404, "ingress")
	if unknownService == unknownHandler || !strings.Contains(unknownService, "service 'Nope' not found") ||
		!strings.Contains(unknownHandler, "no handler 'wave'") {
		t.Fatalf("404 messages: %q / %q", unknownService, unknownHandler)
	}
	if w := do(h, "POST", "/Strict/greet/send", ""); w.Code != 202 {
		t.Fatalf("listed handler: %d %s", w.Code, w.Body)
	}
	// Messages quote what the client sent as is, not HTML-escaped.
	if w := do(h, "POST", "/a%3Cb%3E%26c/greet", ""); !strings.Contains(w.Body.String(), "service 'a<b>&c' not found") {
		t.Fatalf("unknown service with <>&: %s", w.Body)
	}
	for _, tc := range []struct {
		method, target string
		allow          string
	}{
		{"GET", "/Greeter/greet", "POST"},
		{"PUT", "/Greeter/greet/send", "POST"},
		{"POST", "/restate/invocation/inv_x/attach", "GET, HEAD"},
		{"DELETE", "/restate/invocation/Greeter/greet/k/output", "GET, HEAD"},
	} {
		w := do(h, tc.method, tc.target, "")
		decodeError(t, w, 405, "ingress")
		if w.Header().Get("Allow") != tc.allow {
			t.Fatalf("%s %s: Allow = %q", tc.method, tc.target, w.Header().Get("Allow"))
		}
	}
	// Body over the limit: announced, and streamed without length.
	decodeError(t, do(h, "POST", "/Greeter/greet", strings.Repeat("x", 17)), 413, "ingress")
	r := httptest.NewRequest("POST", "/Greeter/greet/send", strings.NewReader(strings.Repeat("x", 100)))
	r.ContentLength = -1
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	decodeError(t, w, 413, "ingress")
	if w := do(h, "POST", "/Greeter/greet/send", strings.Repeat("x", 16)); w.Code != 202 {
		t.Fatalf("body at the limit: %d %s", w.Code, w.Body)
	}
	// JSON content type with a body that is not JSON.
	msg := decodeError(t, do(h, "POST", "/Greeter/greet/send", "{nope", "Content-Type", "application/json; charset=utf-8"), 400, "ingress")
	if !strings.Contains(msg, "not valid JSON") {
		t.Fatalf("bad json: %q", msg)
	}
	decodeError(t, do(h, "POST", "/Greeter/greet/send", "nope", "Content-Type", "application/cloudevents+json"), 400, "ingress")
	if w := do(h, "POST", "/Greeter/greet/send", "nope", "Content-Type", "text/plain"); w.Code != 202 {
		t.Fatalf("text body: %d", w.Code)
	}
	if w := do(h, "POST", "/Greeter/greet/send", "", "Content-Type", "application/json"); w.Code != 202 {
		t.Fatalf("empty JSON body: %d", w.Code)
	}
	// Malformed paths and headers.
	for _, target := range []string{"/Greeter", "/Greeter/greet/extra", "/Greeter/greet/send/x", "/a//b",
		"/restate/invocation/x", "/restate/invocation/a/b/c/d/e", "/restate/invocation/a/b/c/cancel",
		"/a/b/c/d/e/f/g/h"} {
		decodeError(t, do(h, "POST", target, ""), 400, "ingress")
	}
	for _, target := range []string{"/", "/restate", "/restate/admin", "/restate/health/x"} {
		decodeError(t, do(h, "GET", target, ""), 404, "ingress")
	}
	decodeError(t, do(h, "POST", "/Greeter/greet/send", "", "Idempotency-Key", ""), 400, "ingress")
	decodeError(t, do(h, "POST", "/Greeter/greet/send", "", "Idempotency-Key", "a", "Idempotency-Key", "b"), 400, "ingress")
	decodeError(t, do(h, "POST", "/Greeter/greet/send", "", "Idempotency-Key", strings.Repeat("k", 5000)), 400, "ingress")
}

func TestPercentEncodedSegments(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	fd.complete = echoResult
	w := do(h, "POST", "/Greeter/greet/send", "", "Idempotency-Key", "a/b c")
	id := mustID(t, w)
	w = do(h, "GET", "/restate/invocation/Greeter/greet/a%2Fb%20c/output", "")
	if w.Code != 200 || mustID(t, w) != id {
		t.Fatalf("encoded key: %d %s", w.Code, w.Body)
	}
}

// blockingAppend makes Append block until release is closed, announcing
// each entry on entered.
func blockingAppend(fd *fakeDispatcher) (entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, 8), make(chan struct{})
	fd.appendHook = func(ctx context.Context, _ uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
		entered <- struct{}{}
		select {
		case <-release:
			return &rpc.Appended{InvocationId: inv.InvocationId}, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("append: %w", rpc.ErrUnavailable)
		}
	}
	return entered, release
}

func TestLoadShedding(t *testing.T) {
	h, fd := newTestHandler(t, func(c *Config) { c.MaxConcurrent = 2; c.RetryAfter = 3 * time.Second })
	entered, release := blockingAppend(fd)
	results := make(chan int, 2)
	for range 2 {
		go func() { results <- do(h, "POST", "/Greeter/greet/send", "").Code }()
	}
	<-entered
	<-entered
	w := do(h, "POST", "/Greeter/greet/send", "")
	msg := decodeError(t, w, 429, "ingress")
	if w.Header().Get("Retry-After") != "3" || !strings.Contains(msg, "concurrency limit") {
		t.Fatalf("429: Retry-After %q, message %q", w.Header().Get("Retry-After"), msg)
	}
	// Health is never shed.
	if w := do(h, "GET", "/restate/health", ""); w.Code != 200 {
		t.Fatalf("health at the limit: %d", w.Code)
	}
	close(release)
	for range 2 {
		if code := <-results; code != 202 {
			t.Fatalf("admitted request: %d", code)
		}
	}
	if w := do(h, "POST", "/Greeter/greet/send", ""); w.Code != 202 {
		t.Fatalf("after the burst: %d", w.Code)
	}
}

func TestDrain(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	entered, release := blockingAppend(fd)
	inflight := make(chan int, 1)
	go func() { inflight <- do(h, "POST", "/Greeter/greet/send", "").Code }()
	<-entered
	h.Drain()
	w := do(h, "POST", "/Greeter/greet/send", "")
	msg := decodeError(t, w, 503, "ingress")
	if w.Header().Get("Retry-After") == "" || !strings.Contains(msg, "safe") {
		t.Fatalf("drain answer: Retry-After %q message %q", w.Header().Get("Retry-After"), msg)
	}
	decodeError(t, do(h, "GET", "/restate/health", ""), 503, "ingress")
	close(release)
	if code := <-inflight; code != 202 {
		t.Fatalf("in-flight request during drain: %d", code)
	}
}

func TestDispatcherErrors(t *testing.T) {
	for _, tc := range []struct {
		err        error
		code       int
		retryAfter bool
	}{
		{fmt.Errorf("dispatch: %w", rpc.ErrUnavailable), 503, true},
		{rpc.ErrOverloaded, 503, true},
		{fmt.Errorf("x: %w", rpc.ErrInvalid), 400, false},
		{rpc.ErrNotFound, 404, false},
		{errors.New("disk on fire"), 500, false},
	} {
		h, fd := newTestHandler(t, nil)
		fd.appendHook = func(context.Context, uint32, *rpc.Invoke) (*rpc.Appended, error) { return nil, tc.err }
		w := do(h, "POST", "/Greeter/greet", "")
		msg := decodeError(t, w, tc.code, "ingress")
		if (w.Header().Get("Retry-After") != "") != tc.retryAfter {
			t.Fatalf("%v: Retry-After = %q", tc.err, w.Header().Get("Retry-After"))
		}
		if tc.code >= 500 {
			id := mustID(t, w)
			if !strings.Contains(msg, id.String()) || !strings.Contains(msg, "attach") {
				t.Fatalf("%v without key: message %q should name the id and attach", tc.err, msg)
			}
			w = do(h, "POST", "/Greeter/greet", "", "Idempotency-Key", "k")
			msg = decodeError(t, w, tc.code, "ingress")
			if !strings.Contains(msg, "same idempotency-key is safe") {
				t.Fatalf("%v with key: message %q", tc.err, msg)
			}
		}
	}
	// The cluster does not answer before RequestTimeout.
	h, fd := newTestHandler(t, func(c *Config) { c.RequestTimeout = 20 * time.Millisecond })
	fd.appendHook = func(ctx context.Context, _ uint32, _ *rpc.Invoke) (*rpc.Appended, error) {
		<-ctx.Done()
		return nil, ctx.Err() // a dispatcher that forgets to wrap ErrUnavailable
	}
	w := do(h, "POST", "/Greeter/greet/send", "", "Idempotency-Key", "k")
	if msg := decodeError(t, w, 503, "ingress"); !strings.Contains(msg, "safe") || w.Header().Get("Retry-After") == "" {
		t.Fatalf("timeout: %q", msg)
	}
	// Output errors.
	fd.outputHook = func(context.Context, uint32, []byte) (*rpc.InvocationResult, error) {
		return nil, fmt.Errorf("output: %w", rpc.ErrUnavailable)
	}
	w = do(h, "GET", "/restate/invocation/"+invocation.Random().String()+"/output", "")
	decodeError(t, w, 503, "ingress")
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
}

func TestClientGoneWritesNothing(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	entered, _ := blockingAppend(fd)
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, "POST", "/Greeter/greet", nil)
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h.ServeHTTP(w, r); close(done) }()
	<-entered
	cancel()
	<-done
	if w.Body.Len() != 0 {
		t.Fatalf("wrote %q to a client that went away", w.Body)
	}
}

type panickyServices struct{}

func (panickyServices) Lookup(context.Context, string) (*rpc.Service, error) { panic("registry bug") }

// unsureServices cannot tell whether any service exists (no metadata
// leader reachable).
type unsureServices struct{}

func (unsureServices) Lookup(context.Context, string) (*rpc.Service, error) {
	return nil, errors.New("the service registry cannot be checked right now: context deadline exceeded")
}

// TestRegistryUnavailableIsRetryable: when the registry cannot confirm that
// a service is unknown, the answer is a retryable 503, never a definite 404.
func TestRegistryUnavailableIsRetryable(t *testing.T) {
	h, fd := newTestHandler(t, func(c *Config) { c.Services = unsureServices{} })
	for _, path := range []string{"/Greeter/greet", "/Greeter/greet/send"} {
		w := do(h, "POST", path, "")
		msg := decodeError(t, w, 503, "ingress")
		if w.Header().Get("Retry-After") == "" || !strings.Contains(msg, "retrying is safe") {
			t.Errorf("%s: Retry-After %q, message %q", path, w.Header().Get("Retry-After"), msg)
		}
	}
	if n := len(fd.appends); n != 0 {
		t.Fatalf("%d appends for a service nobody could confirm", n)
	}
}

func TestPanicIsRecovered(t *testing.T) {
	h, _ := newTestHandler(t, func(c *Config) { c.Services = panickyServices{} })
	decodeError(t, do(h, "POST", "/Greeter/greet", ""), 500, "ingress")
}

func TestCORS(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	fd.complete = echoResult
	w := do(h, "OPTIONS", "/Greeter/greet", "", "Origin", "http://app.test",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type, idempotency-key")
	if w.Code != 200 || w.Header().Get("Access-Control-Allow-Origin") != "http://app.test" ||
		w.Header().Get("Access-Control-Allow-Methods") != "POST" ||
		w.Header().Get("Access-Control-Allow-Headers") != "content-type, idempotency-key" {
		t.Fatalf("preflight: %d %v", w.Code, w.Header())
	}
	w = do(h, "POST", "/Greeter/greet", "x", "Origin", "http://app.test")
	if w.Code != 200 || w.Header().Get("Access-Control-Allow-Origin") != "http://app.test" ||
		!strings.Contains(w.Header().Get("Access-Control-Expose-Headers"), "x-restate-id") {
		t.Fatalf("CORS call: %d %v", w.Code, w.Header())
	}
}

func TestForwardHeaders(t *testing.T) {
	h, fd := newTestHandler(t, func(c *Config) { c.ForwardHeaders = []string{"Authorization", "traceparent"} })
	do(h, "POST", "/Greeter/greet/send", "", "Authorization", "Bearer x", "Traceparent", "00-abc", "User-Agent", "curl")
	got := fd.lastAppend(t).invoke.Headers
	if len(got) != 2 || got[0].Name != "authorization" || got[0].Value != "Bearer x" || got[1].Name != "traceparent" {
		t.Fatalf("forwarded headers = %v", got)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, fd := newTestHandler(t, func(c *Config) { c.Registerer = reg })
	fd.complete = echoResult
	do(h, "POST", "/Greeter/greet", "")
	do(h, "POST", "/Greeter/greet", "")
	do(h, "POST", "/Nope/greet", "")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "raftgate_ingress_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			counts[key] = m.GetCounter().GetValue()
		}
	}
	if counts["code=200 route=call "] != 2 || counts["code=404 route=call "] != 1 {
		t.Fatalf("counters = %v", counts)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.Dispatcher = newFakeDispatcher(time.Now)
	good.Services = fakeServices{}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"Partitions":         func(c *Config) { c.Partitions = 0 },
		"Dispatcher":         func(c *Config) { c.Dispatcher = nil },
		"Services":           func(c *Config) { c.Services = nil },
		"MaxBodyBytes":       func(c *Config) { c.MaxBodyBytes = -1 },
		"MaxConcurrent":      func(c *Config) { c.MaxConcurrent = -1 },
		"RequestTimeout":     func(c *Config) { c.RequestTimeout = -1 },
		"DefaultCallTimeout": func(c *Config) { c.DefaultCallTimeout = -1 },
		"Retention":          func(c *Config) { c.Retention = -1 },
	} {
		c := good
		mutate(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := New(c); err == nil {
			t.Fatalf("New accepted a bad %s", name)
		}
	}
	// Beside the required fields, a zero Config is DefaultConfig.
	zero := Config{Partitions: 1, Dispatcher: good.Dispatcher, Services: good.Services}
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	got, want := zero.withDefaults(), good
	if got.Retention != want.Retention || got.MaxBodyBytes != want.MaxBodyBytes || got.BodyReadTimeout != want.BodyReadTimeout ||
		got.MaxConcurrent != want.MaxConcurrent || got.RequestTimeout != want.RequestTimeout || got.RetryAfter != want.RetryAfter || got.Clock == nil {
		t.Fatalf("zero config with defaults = %+v, want DefaultConfig's values", got)
	}
}

func TestStopWaiting(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	fd.attaching = make(chan invocation.ID, 1)
	answer := make(chan *httptest.ResponseRecorder)
	go func() { answer <- do(h, "POST", "/Greeter/greet", "") }()
	id := <-fd.attaching
	h.Drain()
	h.StopWaiting()
	w := <-answer
	msg := decodeError(t, w, 503, "ingress")
	if mustID(t, w) != id || w.Header().Get("Retry-After") == "" || !strings.Contains(msg, "attach") {
		t.Fatalf("stop waiting: id %s, message %q", w.Header().Get("X-Restate-Id"), msg)
	}
}

// TestHandlerNameValidated (issue 15, item 2): a handler path segment that
// could not be registered is refused with 400 and the rule, before
// anything is appended.
func TestHandlerNameValidated(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	fd.complete = echoResult
	for _, target := range []string{"/Greeter/%2E%2E", "/Greeter/%2e", "/Greeter/..", "/Greeter/.",
		"/Greeter/%0A", "/Greeter/a%20b", "/Greeter/a%3Fb", "/Greeter/a%2Fb", "/Greeter/a-b", "/Greeter/%00",
		"/Greeter/1st", "/Greeter/%2E%2E/send", "/Greeter/" + strings.Repeat("h", 129)} {
		msg := decodeError(t, do(h, "POST", target, ""), 400, "ingress")
		if !strings.Contains(msg, "want a letter or '_', then letters, digits or '_'") {
			t.Errorf("POST %s: message %q does not state the rule", target, msg)
		}
	}
	if n := fd.appendCount(); n != 0 {
		t.Fatalf("%d invalid handler names appended", n)
	}
	for _, target := range []string{"/Greeter/greet", "/Greeter/_private2", "/Greeter/" + strings.Repeat("h", 128)} {
		if w := do(h, "POST", target+"/send", ""); w.Code != 202 {
			t.Errorf("POST %s/send: %d %s", target, w.Code, w.Body)
		}
	}
}

// TestSendRefusesATimeout (issue 15, item 11): a send does not wait for the
// result, so a client timeout on it is a 400, not silently ignored.
func TestSendRefusesATimeout(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	for _, w := range []*httptest.ResponseRecorder{
		do(h, "POST", "/Greeter/greet/send?timeout=5s", ""),
		do(h, "POST", "/Greeter/greet/send", "", "x-raftgate-timeout", "5s"),
	} {
		if msg := decodeError(t, w, 400, "ingress"); !strings.Contains(msg, "works only with a call or an attach") {
			t.Errorf("timeout on a send: %q", msg)
		}
	}
	if n := fd.appendCount(); n != 0 {
		t.Fatalf("%d sends with a timeout appended", n)
	}
}
