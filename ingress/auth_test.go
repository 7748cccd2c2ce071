package ingress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// Status and Cancel make fakeDispatcher an InvocationControl.
func (f *fakeDispatcher) Status(ctx context.Context, part uint32, idb []byte) (*rpc.InvocationRecord, error) {
	id, err := invocation.IDFromBytes(idb)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", rpc.ErrInvalid, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fi := f.invocations[id]
	if fi == nil {
		return nil, rpc.ErrNotFound
	}
	return &rpc.InvocationRecord{Invoke: fi.invoke}, nil
}

func (f *fakeDispatcher) Cancel(ctx context.Context, part uint32, idb []byte) error {
	id, err := invocation.IDFromBytes(idb)
	if err != nil {
		return fmt.Errorf("%w: %v", rpc.ErrInvalid, err)
	}
	f.mu.Lock()
	known := f.invocations[id] != nil
	f.mu.Unlock()
	if !known {
		return rpc.ErrNotFound
	}
	f.finish(id, &rpc.Result{Status: 409, Failed: true, Error: "cancelled"})
	return nil
}

const (
	adminToken   = "admin-token-0123456789"
	greeterToken = "greeter-token-0123456789"
	callerToken  = "caller-only-0123456789"
)

func testTokens(t *testing.T) *Tokens {
	t.Helper()
	digest := sha256.Sum256([]byte(greeterToken))
	tokens, err := ParseTokens([]byte(fmt.Sprintf(`
[[token]]
name = "ops"
token = %q
services = ["*"]
attach = true
output = true
cancel = true

[[token]]
name = "greeter"
sha256 = %q
services = ["Greeter"]
attach = true
output = true

[[token]]
name = "caller"
token = %q
services = ["Strict"]
`, adminToken, hex.EncodeToString(digest[:]), callerToken)))
	if err != nil {
		t.Fatalf("ParseTokens: %v", err)
	}
	return tokens
}

func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

func TestAuthAllowsGrantedRequests(t *testing.T) {
	h, fd := newTestHandler(t, func(c *Config) { c.Tokens = testTokens(t) })
	fd.complete = echoResult
	if w := do(h, "POST", "/Greeter/greet", `{"a":1}`, bearer(greeterToken)...); w.Code != 200 {
		t.Fatalf("call with a granted token: %d %s", w.Code, w.Body)
	}
	w := do(h, "POST", "/Strict/greet/send", "", bearer(callerToken)...)
	if w.Code != 202 {
		t.Fatalf("send with a granted token: %d %s", w.Code, w.Body)
	}
	id := mustID(t, w)
	if w := do(h, "GET", "/restate/invocation/"+id.String()+"/output", "", bearer(adminToken)...); w.Code != 200 {
		t.Fatalf("output with an all-services token: %d %s", w.Code, w.Body)
	}
	w = do(h, "POST", "/Greeter/greet/send", "", append(bearer(greeterToken), "Idempotency-Key", "k")...)
	greetID := mustID(t, w)
	if w := do(h, "GET", "/restate/invocation/"+greetID.String()+"/attach", "", bearer(greeterToken)...); w.Code != 200 {
		t.Fatalf("attach by id to its own service's invocation: %d %s", w.Code, w.Body)
	}
	if w := do(h, "GET", "/restate/invocation/Greeter/greet/k/output", "", bearer(greeterToken)...); w.Code != 200 {
		t.Fatalf("output by key: %d %s", w.Code, w.Body)
	}
	// Health needs no token: load balancers probe it.
	if w := do(h, "GET", "/restate/health", ""); w.Code != 200 {
		t.Fatalf("health without a token: %d", w.Code)
	}
	// The scheme is case-insensitive (RFC 9110).
	if w := do(h, "POST", "/Greeter/greet", "", "Authorization", "bearer "+greeterToken); w.Code != 200 {
		t.Fatalf("lower-case scheme: %d %s", w.Code, w.Body)
	}
}

func TestAuthRefusesAndProposesNothing(t *testing.T) {
	h, fd := newTestHandler(t, func(c *Config) { c.Tokens = testTokens(t) })
	fd.complete = echoResult
	for _, tc := range []struct {
		name    string
		headers []string
		code    int
	}{
		{"no token", nil, 401},
		{"basic auth", []string{"Authorization", "Basic dXNlcjpwYXNz"}, 401},
		{"empty bearer", []string{"Authorization", "Bearer "}, 401},
		{"wrong token", bearer("not-a-token-0123456789"), 403},
		{"other service", bearer(callerToken), 403},
	} {
		w := do(h, "POST", "/Greeter/greet", `{}`, tc.headers...)
		msg := decodeError(t, w, tc.code, "ingress")
		if tc.code == 401 && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate = %q", tc.name, w.Header().Get("WWW-Authenticate"))
		}
		if strings.Contains(msg, "0123456789") || strings.Contains(msg, "dXNlcjpwYXNz") {
			t.Errorf("%s: the answer echoes the token: %q", tc.name, msg)
		}
	}
	if n := fd.appendCount(); n != 0 {
		t.Fatalf("refused requests proposed %d invocations", n)
	}

	// Result reads need their flag, and by id the service is checked.
	w := do(h, "POST", "/Greeter/greet/send", "", append(bearer(adminToken), "Idempotency-Key", "k")...)
	id := mustID(t, w)
	decodeError(t, do(h, "GET", "/restate/invocation/"+id.String()+"/attach", "", bearer(callerToken)...), 403, "ingress")
	decodeError(t, do(h, "GET", "/restate/invocation/Greeter/greet/k/output", "", bearer(callerToken)...), 403, "ingress")
	w = do(h, "POST", "/Strict/greet/send", "", bearer(callerToken)...)
	strictID := mustID(t, w)
	decodeError(t, do(h, "GET", "/restate/invocation/"+strictID.String()+"/output", "", bearer(greeterToken)...), 403, "ingress")
	// Cancel needs its flag.
	decodeError(t, do(h, "PATCH", "/restate/invocation/"+id.String()+"/cancel", "", bearer(greeterToken)...), 403, "ingress")
}

func TestAuthCancel(t *testing.T) {
	h, fd := newTestHandler(t, func(c *Config) { c.Tokens = testTokens(t) })
	w := do(h, "POST", "/Greeter/greet/send", "", bearer(adminToken)...)
	id := mustID(t, w)
	if w := do(h, "PATCH", "/restate/invocation/"+id.String()+"/cancel", "", bearer(adminToken)...); w.Code != 202 {
		t.Fatalf("cancel: %d %s", w.Code, w.Body)
	}
	res, err := fd.Output(context.Background(), 0, id[:])
	if err != nil || res.GetResult().GetError() != "cancelled" {
		t.Fatalf("after cancel: %v %v", res, err)
	}
	decodeError(t, do(h, "GET", "/restate/invocation/"+id.String()+"/cancel", "", bearer(adminToken)...), 405, "ingress")
}

func TestAuthReload(t *testing.T) {
	h, fd := newTestHandler(t, nil)
	fd.complete = echoResult
	if w := do(h, "POST", "/Greeter/greet", ""); w.Code != 200 {
		t.Fatalf("authentication off: %d %s", w.Code, w.Body)
	}
	h.SetTokens(testTokens(t))
	decodeError(t, do(h, "POST", "/Greeter/greet", ""), 401, "ingress")
	revoked, err := ParseTokens([]byte(fmt.Sprintf("[[token]]\nname = \"ops\"\ntoken = %q\nservices = [\"*\"]\n", adminToken)))
	if err != nil {
		t.Fatal(err)
	}
	h.SetTokens(revoked)
	decodeError(t, do(h, "POST", "/Greeter/greet", "", bearer(greeterToken)...), 403, "ingress")
	if w := do(h, "POST", "/Greeter/greet", "", bearer(adminToken)...); w.Code != 200 {
		t.Fatalf("token kept by the reload: %d %s", w.Code, w.Body)
	}
}

func TestParseTokensRefusesBadFiles(t *testing.T) {
	for name, file := range map[string]string{
		"not toml":        "[[token]\nname=",
		"unknown key":     "[[token]]\nname = \"a\"\ntoken = \"0123456789abcdefgh\"\nservices = [\"*\"]\ncall = true\n",
		"no name":         "[[token]]\ntoken = \"0123456789abcdefgh\"\nservices = [\"*\"]\n",
		"both secrets":    "[[token]]\nname = \"a\"\ntoken = \"0123456789abcdefgh\"\nsha256 = \"00\"\nservices = [\"*\"]\n",
		"short token":     "[[token]]\nname = \"a\"\ntoken = \"short\"\nservices = [\"*\"]\n",
		"bad digest":      "[[token]]\nname = \"a\"\nsha256 = \"abc\"\nservices = [\"*\"]\n",
		"no services":     "[[token]]\nname = \"a\"\ntoken = \"0123456789abcdefgh\"\n",
		"star and more":   "[[token]]\nname = \"a\"\ntoken = \"0123456789abcdefgh\"\nservices = [\"*\", \"B\"]\n",
		"duplicate name":  "[[token]]\nname = \"a\"\ntoken = \"0123456789abcdefgh\"\nservices = [\"*\"]\n[[token]]\nname = \"a\"\ntoken = \"0123456789abcdefgX\"\nservices = [\"*\"]\n",
		"duplicate token": "[[token]]\nname = \"a\"\ntoken = \"0123456789abcdefgh\"\nservices = [\"*\"]\n[[token]]\nname = \"b\"\ntoken = \"0123456789abcdefgh\"\nservices = [\"*\"]\n",
	} {
		_, err := ParseTokens([]byte(file))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%s: the error quotes the token: %v", name, err)
		}
	}
}
