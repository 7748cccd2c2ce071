package admin

import (
	"net/http"
	"testing"

	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
)

func withDefaultRetry(c *Config) {
	c.RetryInForce = func(p *rpc.RetryPolicy) *rpc.RetryPolicy { return outbox.DefaultPolicy().For(p).Proto() }
}

func TestServiceRetryPolicy(t *testing.T) {
	f := newFixture(t, withDefaultRetry)
	// Without a policy: the cluster's defaults, filled in.
	a := f.do(t, "PUT", "/services/Plain", `{"url":"http://127.0.0.1:1"}`)
	if v := decode[ServiceView](t, a); v.Retry != (RetryView{MaxAttempts: 10, InitialBackoff: "100ms", MaxBackoff: "30s", AttemptTimeout: "30s", OnMaxAttempts: "pause"}) {
		t.Fatalf("default policy shown as %+v", v.Retry)
	}
	if got := f.registry.services["Plain"].GetRetry(); got != nil {
		t.Fatalf("a registration without retry stored %v", got)
	}
	// Some fields set: those are stored, the rest shown from the defaults.
	a = f.do(t, "PUT", "/services/Flaky", `{"url":"http://127.0.0.1:1","retry":{"maxAttempts":3,"initialBackoff":"1s","attemptTimeout":"2.5s"}}`)
	if a.status != http.StatusCreated {
		t.Fatalf("PUT with retry: %d %s", a.status, a.body)
	}
	stored := f.registry.services["Flaky"].GetRetry()
	if stored.GetMaxAttempts() != 3 || stored.GetInitialBackoffMs() != 1000 || stored.GetMaxBackoffMs() != 0 || stored.GetAttemptTimeoutMs() != 2500 {
		t.Fatalf("stored policy %v", stored)
	}
	want := RetryView{MaxAttempts: 3, InitialBackoff: "1s", MaxBackoff: "30s", AttemptTimeout: "2.5s", OnMaxAttempts: "pause"}
	if v := decode[ServiceView](t, f.do(t, "GET", "/services/Flaky", "")); v.Retry != want {
		t.Fatalf("GET shows %+v, want %+v", v.Retry, want)
	}
	// Per handler: its fields over the service's, onMaxAttempts included.
	a = f.do(t, "PUT", "/services/Mixed", `{"url":"http://127.0.0.1:1","retry":{"maxAttempts":3,"onMaxAttempts":"fail"},
		"handlerConfig":{"charge":{"retry":{"maxAttempts":5,"onMaxAttempts":"pause"}}}}`)
	if a.status != http.StatusCreated {
		t.Fatalf("PUT with handlerConfig: %d %s", a.status, a.body)
	}
	v := decode[ServiceView](t, f.do(t, "GET", "/services/Mixed", ""))
	if v.Retry.OnMaxAttempts != "fail" || v.Retry.MaxAttempts != 3 {
		t.Fatalf("service policy %+v", v.Retry)
	}
	if h := v.HandlerConfig["charge"].Retry; h.OnMaxAttempts != "pause" || h.MaxAttempts != 5 || h.InitialBackoff != "100ms" {
		t.Fatalf("handler policy %+v", h)
	}
	for _, body := range []struct{ body, msg string }{
		{`{"url":"http://h","retry":{"maxAttempts":0}}`, "retry.maxAttempts 0"},
		{`{"url":"http://h","retry":{"maxAttempts":100000}}`, "retry.maxAttempts"},
		{`{"url":"http://h","retry":{"initialBackoff":"soon"}}`, "retry.initialBackoff"},
		{`{"url":"http://h","retry":{"attemptTimeout":"0s"}}`, "retry.attemptTimeout"},
		{`{"url":"http://h","retry":{"maxBackoff":"48h"}}`, "retry.maxBackoff"},
		{`{"url":"http://h","retry":{"initialBackoff":"2s","maxBackoff":"1s"}}`, "above retry.maxBackoff"},
		{`{"url":"http://h","retry":{"initialBackoff":"1m"}}`, "above the maximum backoff 30s"},
		{`{"url":"http://h","retry":{"maxBackoff":"50ms"}}`, "initial backoff 100ms"},
		{`{"url":"http://h","retry":{"attempts":3}}`, "unknown field"},
		{`{"url":"http://h","retry":{"onMaxAttempts":"retry"}}`, "retry.onMaxAttempts"},
		{`{"url":"http://h","handlers":["a"],"handlerConfig":{"b":{}}}`, "not in handlers"},
	} {
		wantError(t, f.do(t, "PUT", "/services/Bad", body.body), http.StatusBadRequest, body.msg)
	}
}
