package ingress

import (
	"net/url"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/invocation"
)

func TestParsePath(t *testing.T) {
	for in, want := range map[string]route{
		"/Greeter/greet":                       {kind: routeCall, service: "Greeter", handler: "greet"},
		"/Greeter/greet/":                      {kind: routeCall, service: "Greeter", handler: "greet"},
		"/Greeter/greet/send":                  {kind: routeSend, service: "Greeter", handler: "greet", sendOrKeyed: true},
		"/Counter/a%2Fb/add":                   {kind: routeCall, service: "Counter", objectKey: "a/b", handler: "add", keyed: true},
		"/Counter/a/add/send":                  {kind: routeSend, service: "Counter", objectKey: "a", handler: "add", keyed: true},
		"/restate/workflow/W/id1/attach":       {kind: routeAttach, service: "W", objectKey: "id1", keyed: true, workflow: true},
		"/restate/workflow/W/id1/output":       {kind: routeOutput, service: "W", objectKey: "id1", keyed: true, workflow: true},
		"/restate/invocation/O/k/h/i/attach":   {kind: routeAttach, service: "O", objectKey: "k", handler: "h", key: "i", keyed: true},
		"/my%20svc/h%2Fx":                      {kind: routeCall, service: "my svc", handler: "h/x"},
		"/restate/health":                      {kind: routeHealth},
		"/restate/invocation/inv_x/attach":     {kind: routeAttach, id: "inv_x"},
		"/restate/invocation/inv_x/output":     {kind: routeOutput, id: "inv_x"},
		"/restate/invocation/S/h/k%2F1/attach": {kind: routeAttach, service: "S", handler: "h", key: "k/1"},
		"/restate/invocation/S/h/k/output":     {kind: routeOutput, service: "S", handler: "h", key: "k"},
	} {
		got, err := parsePath(in)
		if err != nil || got != want {
			t.Errorf("parsePath(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, code := range map[string]int{
		"":                                400,
		"/":                               404,
		"/restate":                        404,
		"/restate/foo":                    404,
		"/Greeter":                        400,
		"/Greeter/greet/x/call":           400,
		"/restate/workflow/W/id":          400,
		"/restate/workflow/W/id/run":      400,
		"/a//b":                           400,
		"//":                              404,
		"/a/%zz":                          400,
		"/a/%2":                           400,
		"/restate/invocation":             400,
		"/restate/invocation/x":           400,
		"/restate/invocation/x/y":         400,
		"/restate/invocation/a/b/c/d/e/f": 400,
		"/a/b/c/d/e/f/g/h/i":              400,
	} {
		if _, err := parsePath(in); err == nil || err.code != code {
			t.Errorf("parsePath(%q) error = %v, want code %d", in, err, code)
		}
	}
}

func TestParseInvocationIDCanonical(t *testing.T) {
	id := invocation.Random()
	s := id.String()
	if got, err := parseInvocationID(s); err != nil || got != id {
		t.Fatalf("parse(%s) = %v, %v", s, got, err)
	}
	if got, err := parseInvocationID("inv_" + strings.ToUpper(s[4:])); err != nil || got != id {
		t.Fatalf("upper case: %v, %v", got, err)
	}
	// Flip a spare low bit of the last character: invocation.ParseID accepts
	// it, the ingress does not.
	last := s[len(s)-1]
	alt := strings.IndexByte("abcdefghijklmnopqrstuvwxyz234567", last) ^ 1
	other := s[:len(s)-1] + string("abcdefghijklmnopqrstuvwxyz234567"[alt])
	if _, err := parseInvocationID(other); err == nil {
		t.Fatalf("non-canonical spelling %s accepted", other)
	}
}

func TestQueryValue(t *testing.T) {
	for _, tc := range []struct {
		raw, name, want string
		found           bool
	}{
		{"delay=10s", "delay", "10s", true},
		{"a=1&Delay=PT1S&b=2", "delay", "PT1S", true},
		{"x=1", "delay", "", false},
		{"delay=1h+30m", "delay", "1h 30m", true},
		{"de%6Cay=5s", "delay", "5s", true},
		{"", "delay", "", false},
	} {
		got, found, err := queryValue(tc.raw, tc.name)
		if err != nil || got != tc.want || found != tc.found {
			t.Errorf("queryValue(%q) = %q %v %v", tc.raw, got, found, err)
		}
	}
	// Given twice, even spelled differently: which one was meant is unknown.
	for _, raw := range []string{"delay=1s&delay=2s", "delay=1s&DELAY=1s", "de%6Cay=1s&x=1&delay=2s"} {
		if _, _, err := queryValue(raw, "delay"); err == nil || !strings.Contains(err.msg, "more than once") {
			t.Errorf("queryValue(%q): %v, want a 'given more than once' error", raw, err)
		}
	}
}

// escapeRoute prints a route as a path, for the round trip of the fuzzer.
func escapeRoute(r route) string {
	e := url.PathEscape
	target := "/" + e(r.service) + "/" + e(r.handler)
	if r.keyed {
		target = "/" + e(r.service) + "/" + e(r.objectKey) + "/" + e(r.handler)
	}
	switch r.kind {
	case routeCall:
		return target
	case routeSend:
		return target + "/send"
	case routeHealth:
		return "/restate/health"
	}
	verb := "/attach"
	if r.kind == routeOutput {
		verb = "/output"
	}
	switch {
	case r.workflow:
		return "/restate/workflow/" + e(r.service) + "/" + e(r.objectKey) + verb
	case r.byKey() && r.keyed:
		return "/restate/invocation/" + e(r.service) + "/" + e(r.objectKey) + "/" + e(r.handler) + "/" + e(r.key) + verb
	case r.byKey():
		return "/restate/invocation/" + e(r.service) + "/" + e(r.handler) + "/" + e(r.key) + verb
	}
	return "/restate/invocation/" + e(r.id) + verb
}
