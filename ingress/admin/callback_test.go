package admin

import (
	"net/http"
	"testing"

	"github.com/raftgate/raftgate/callback"
)

// A service's default callback URL is stored and shown when its origin is
// allowed, and refused with 400 otherwise.
func TestServiceCallbackURL(t *testing.T) {
	allow, err := callback.ParseAllow([]string{"http://127.0.0.1:7000"})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *Config) { c.CallbackAllow = allow })
	a := f.do(t, "PUT", "/services/Hooked", `{"url":"http://127.0.0.1:1","callbackUrl":"http://127.0.0.1:7000/done"}`)
	if a.status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	if v := decode[ServiceView](t, a); v.CallbackURL != "http://127.0.0.1:7000/done" {
		t.Fatalf("answer %+v", v)
	}
	if got := f.registry.services["Hooked"].GetCallbackUrl(); got != "http://127.0.0.1:7000/done" {
		t.Fatalf("stored callback URL %q", got)
	}
	wantError(t, f.do(t, "PUT", "/services/Other", `{"url":"http://127.0.0.1:1","callbackUrl":"http://127.0.0.1:7001/"}`),
		http.StatusBadRequest, "callback-allow")
	if _, ok := f.registry.services["Other"]; ok {
		t.Fatal("a service with a callback URL outside the allow-list was registered")
	}
}
