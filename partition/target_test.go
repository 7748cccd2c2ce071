package partition

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestHandlerSegmentsCannotEscape (issue 15, item 2): every handler name
// reaches the service as one escaped path segment under
// {url}/{service}/; a dot segment is refused without a request.
func TestHandlerSegmentsCannotEscape(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]string{} // x-restate-id → escaped path seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.Header.Get(headerInvocationID)] = r.URL.EscapedPath()
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = staticServices{"Echo": {Name: "Echo", Url: srv.URL + "/base/"}}
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	for handler, wantPath := range map[string]string{
		"ok":     "/base/Echo/ok",
		"a\nb":   "/base/Echo/a%0Ab",
		"a b":    "/base/Echo/a%20b",
		"a?b":    "/base/Echo/a%3Fb",
		"a/b":    "/base/Echo/a%2Fb",
		"../x":   "/base/Echo/..%2Fx",
		"%2E%2E": "/base/Echo/%252E%252E",
		"..":     "", // refused
		".":      "",
	} {
		inv := newInvoke("Echo", 0)
		inv.Handler = handler
		if _, err := p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		res := awaitOutput(t, p, inv.InvocationId).Result
		id := idString(inv.InvocationId)
		mu.Lock()
		got, delivered := paths[id]
		mu.Unlock()
		if wantPath == "" {
			if delivered || res.Status != http.StatusBadRequest || !res.Failed || !strings.Contains(res.Error, "path segment") {
				t.Errorf("handler %q: delivered to %q (%v), result %v; want a 400 without a request", handler, got, delivered, res)
			}
			continue
		}
		if got != wantPath || res.Status != http.StatusOK {
			t.Errorf("handler %q: delivered to %q (result %d), want %q", handler, got, res.Status, wantPath)
		}
	}
}

// The remembered target is the one built afresh: per service URL (a new
// registration's URL is used at once), service and handler.
func TestTargetCache(t *testing.T) {
	var c targetCache
	for range 2 { // built, then remembered
		for _, tc := range []struct{ base, service, handler, want string }{
			{"http://a/base/", "Echo", "ok", "http://a/base/Echo/ok"},
			{"http://b/", "Echo", "ok", "http://b/Echo/ok"},
			{"http://a/base/", "Echo", "a/b", "http://a/base/Echo/a%2Fb"},
			{"http://a/base/", "Other", "ok", "http://a/base/Other/ok"},
		} {
			if got, err := c.get(tc.base, tc.service, tc.handler); err != nil || got != tc.want {
				t.Errorf("target of %q %q %q = %q, %v; want %q", tc.base, tc.service, tc.handler, got, err, tc.want)
			}
		}
	}
	if _, err := c.get("http://a/%zz", "Echo", "ok"); err == nil {
		t.Error("a malformed service URL was accepted")
	}
	for i := range maxCachedTargets + 1 {
		if _, err := c.get("http://a/", "Echo", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.urls); n > maxCachedTargets {
		t.Fatalf("%d targets remembered, want at most %d", n, maxCachedTargets)
	}
}
