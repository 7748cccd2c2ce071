package ingress

import (
	"net/http"
	"strings"
	"testing"
)

// x-raftgate-priority travels with the invocation (0 without it); a value
// that is not an integer from MinPriority to MaxPriority is a 400 and
// nothing is appended.
func TestPriorityHeader(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	for hdr, want := range map[string]int32{"": 0, "7": 7, " -100 ": -100, "100": 100} {
		args := []string{}
		if hdr != "" {
			args = []string{"x-raftgate-priority", hdr}
		}
		if w := do(h, http.MethodPost, "/Greeter/greet/send", "hi", args...); w.Code != http.StatusAccepted {
			t.Fatalf("priority %q: %d %s", hdr, w.Code, w.Body)
		}
		if got := fd.lastAppend(t).invoke.Priority; got != want {
			t.Fatalf("priority %q recorded as %d, want %d", hdr, got, want)
		}
	}
	for _, bad := range []string{"101", "-101", "high", "1.5", ""} {
		n := fd.appendCount()
		w := do(h, http.MethodPost, "/Greeter/greet/send", "hi", "x-raftgate-priority", bad)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "x-raftgate-priority") {
			t.Fatalf("priority %q: %d %s, want 400", bad, w.Code, w.Body)
		}
		if fd.appendCount() != n {
			t.Fatalf("priority %q: appended anyway", bad)
		}
	}
}
