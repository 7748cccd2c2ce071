package ingress

import (
	"strings"
	"testing"

	"github.com/raftgate/raftgate/invocation"
)

// FuzzParsePath: never panics; a parsed route printed back parses to
// itself; errors are 400 or 404 only.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/Greeter/greet", "/Greeter/greet/send", "/restate/health",
		"/restate/invocation/inv_abc/attach", "/restate/invocation/S/h/k%2F/output", "/a//b", "/%zz", "/", "",
		"/restate/invocation/a/b/c/d/e/f/g", "/x/y/",
		"/Counter/k/add", "/Counter/k/add/send", "/restate/workflow/W/i/output", "/restate/invocation/O/k/h/i/attach"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		r, err := parsePath(path)
		if err != nil {
			if err.code != 400 && err.code != 404 {
				t.Fatalf("parsePath(%q) code %d", path, err.code)
			}
			return
		}
		if r.kind == routeOther {
			t.Fatalf("parsePath(%q) = routeOther without error", path)
		}
		if r.service == "restate" && (r.kind == routeCall || r.kind == routeSend) {
			t.Fatalf("parsePath(%q) routed the reserved prefix to a service", path)
		}
		back := escapeRoute(r)
		r2, err := parsePath(back)
		if err != nil || r2 != r {
			t.Fatalf("round trip %q -> %+v -> %q -> %+v, %v", path, r, back, r2, err)
		}
	})
}

// FuzzParseInvocationID: never panics; an accepted id prints back to the
// input (case aside), and every printed id is accepted.
func FuzzParseInvocationID(f *testing.F) {
	f.Add("inv_")
	f.Add("inv_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Add(invocation.Idempotent("S", "h", "k").String())
	f.Add(strings.ToUpper(invocation.Idempotent("S", "h", "k").String()))
	f.Add("inv_" + strings.Repeat("7", 39))
	f.Fuzz(func(t *testing.T, s string) {
		id, err := parseInvocationID(s)
		if err != nil {
			return
		}
		if !strings.EqualFold(id.String(), s) {
			t.Fatalf("parseInvocationID(%q) = %s: not the same id text", s, id)
		}
		again, err := parseInvocationID(id.String())
		if err != nil || again != id {
			t.Fatalf("printed id %s does not parse back: %v", id, err)
		}
		if p := invocation.PartitionFor(id.PartitionKey(), 7); p < 1 || p > 7 {
			t.Fatalf("partition %d out of range", p)
		}
	})
}
