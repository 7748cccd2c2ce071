package ingress

import (
	"net/http"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/callback"
	"github.com/raftgate/raftgate/rpc"
)

// x-raftgate-callback: a URL in the allow-list travels with the
// invocation, one outside it is a 400 and nothing is appended; without
// the header the service's default callback URL is used.
func TestCallbackHeader(t *testing.T) {
	allow, err := callback.ParseAllow([]string{"http://127.0.0.1:7000"})
	if err != nil {
		t.Fatal(err)
	}
	h, fd := newTestHandler(t, func(c *Config) {
		c.CallbackAllow = allow
		c.Services.(fakeServices)["Hooked"] = &rpc.Service{Name: "Hooked", Url: "http://127.0.0.1:1", CallbackUrl: "http://127.0.0.1:7000/default"}
	})
	w := do(h, http.MethodPost, "/Greeter/greet/send", "hi", "x-raftgate-callback", "http://127.0.0.1:7000/done")
	if w.Code != http.StatusAccepted {
		t.Fatalf("allowed callback: %d %s", w.Code, w.Body)
	}
	if got := fd.lastAppend(t).invoke.CallbackUrl; got != "http://127.0.0.1:7000/done" {
		t.Fatalf("callback URL %q", got)
	}
	for _, bad := range []string{"http://127.0.0.1:7001/done", "https://127.0.0.1:7000/", "not a url"} {
		n := fd.appendCount()
		w = do(h, http.MethodPost, "/Greeter/greet/send", "hi", "x-raftgate-callback", bad)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "x-raftgate-callback") {
			t.Fatalf("callback %q: %d %s, want 400", bad, w.Code, w.Body)
		}
		if fd.appendCount() != n {
			t.Fatalf("callback %q: appended anyway", bad)
		}
	}
	if w = do(h, http.MethodPost, "/Hooked/greet/send", "hi"); w.Code != http.StatusAccepted {
		t.Fatalf("service default: %d %s", w.Code, w.Body)
	}
	if got := fd.lastAppend(t).invoke.CallbackUrl; got != "http://127.0.0.1:7000/default" {
		t.Fatalf("service default callback URL %q", got)
	}
	if w = do(h, http.MethodPost, "/Greeter/greet/send", "hi"); w.Code != http.StatusAccepted || fd.lastAppend(t).invoke.CallbackUrl != "" {
		t.Fatalf("no callback: %d, URL %q", w.Code, fd.lastAppend(t).invoke.CallbackUrl)
	}
}
