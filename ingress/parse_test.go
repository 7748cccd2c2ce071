package ingress

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/invocation"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0":          0,
		"10s":        10 * time.Second,
		"1h30m":      90 * time.Minute,
		"1.5s":       1500 * time.Millisecond,
		"500ms":      500 * time.Millisecond,
		"1000ms":     time.Second,
		"2us":        2 * time.Microsecond,
		"3µs":        3 * time.Microsecond,
		"7ns":        7,
		" 60 sec ":   time.Minute,
		"60sec":      time.Minute,
		"1h 30min":   90 * time.Minute,
		"2 days":     48 * time.Hour,
		"1w":         7 * 24 * time.Hour,
		"+5s":        5 * time.Second,
		"PT10S":      10 * time.Second,
		"pt10s":      10 * time.Second,
		"PT1H30M":    90 * time.Minute,
		"P1D":        24 * time.Hour,
		"P1W":        7 * 24 * time.Hour,
		"P1DT12H":    36 * time.Hour,
		"PT0.5S":     500 * time.Millisecond,
		"PT0,25S":    250 * time.Millisecond,
		"PT1M0.001S": time.Minute + time.Millisecond,
		"PT36H":      36 * time.Hour,
	} {
		got, err := parseDuration(in)
		if err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, wantErr := range map[string]error{
		"":                        errDurationEmpty,
		"  ":                      errDurationEmpty,
		"-1s":                     errDurationNegative,
		"10":                      errDurationSyntax,
		"s":                       errDurationSyntax,
		"10 parsecs":              errDurationSyntax,
		"1.s.":                    errDurationSyntax,
		"P":                       errDurationSyntax,
		"PT":                      errDurationSyntax,
		"P1":                      errDurationSyntax,
		"P1H":                     errDurationSyntax, // H needs the T
		"PT1D":                    errDurationSyntax,
		"PT1S1M":                  errDurationSyntax, // out of order
		"PT1M1M":                  errDurationSyntax,
		"P1DT":                    errDurationSyntax,
		"P1Y":                     errDurationAmbiguous,
		"P1M":                     errDurationAmbiguous,
		"2 months":                errDurationAmbiguous,
		"1M":                      errDurationAmbiguous,
		"99999999999999999999h":   errDurationOverflow,
		"P9999999999999999999W":   errDurationOverflow,
		"3000000h":                errDurationOverflow,
		"2562047h 1h":             errDurationOverflow,
		"PT9223372036.854775808S": errDurationOverflow,
	} {
		if _, err := parseDuration(in); !errors.Is(err, wantErr) {
			t.Errorf("parseDuration(%q) error = %v, want %v", in, err, wantErr)
		}
	}
}

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
