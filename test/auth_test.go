package test

import (
	"context"
	"encoding/json"
	"github.com/raftgate/raftgate/internal/testutil"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	authOpsToken  = "ops-token-0123456789abcdef"
	authEchoToken = "echo-token-0123456789abcdef"
	authNewToken  = "new-token-0123456789abcdef"
)

// appliedIndexes reads every partition's applied index from node n (not
// the metadata group's).
func appliedIndexes(t *testing.T, n *node) map[uint32]uint64 {
	t.Helper()
	r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/cluster", nil, nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("/cluster: %v %+v", err, r)
	}
	var view struct {
		Partitions []struct {
			ID           uint32 `json:"id"`
			AppliedIndex uint64 `json:"appliedIndex"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(r.body, &view); err != nil {
		t.Fatalf("/cluster body: %v", err)
	}
	out := map[uint32]uint64{}
	for _, p := range view.Partitions {
		if p.ID != 0 { // the metadata group writes on its own (the cluster record, flow shares)
			out[p.ID] = p.AppliedIndex
		}
	}
	return out
}

// TestIngressTokens runs a node with --ingress-tokens: granted requests
// pass, refused ones get 401/403 and propose nothing, and SIGHUP reloads
// the file (a broken file keeps the tokens in force).
func TestIngressTokens(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "tokens.toml")
	writeTokens := func(content string) {
		t.Helper()
		if err := os.WriteFile(tokenFile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeTokens(`
[[token]]
name = "ops"
token = "` + authOpsToken + `"
services = ["*"]
attach = true
output = true

[[token]]
name = "echo-only"
token = "` + authEchoToken + `"
services = ["Echo"]
`)
	c := startCluster(t, clusterOpts{nodes: 1, extraArgs: func(int) []string {
		return []string{"--ingress-tokens", tokenFile}
	}})
	n := c.nodes[0]
	rec := newRecorder(t)
	c.registerService(n, "Echo", rec.srv.URL)
	c.registerService(n, "Other", rec.srv.URL)
	ctx := context.Background()
	auth := func(token string) map[string]string { return map[string]string{"authorization": "Bearer " + token} }

	before := appliedIndexes(t, n)
	for _, tc := range []struct {
		name   string
		path   string
		header map[string]string
		code   int
	}{
		{"no token", "/Echo/echo", nil, http.StatusUnauthorized},
		{"unknown token", "/Echo/echo", auth("wrong-token-0123456789abcdef"), http.StatusForbidden},
		{"service not granted", "/Other/echo", auth(authEchoToken), http.StatusForbidden},
		{"send not granted", "/Other/echo/send", auth(authEchoToken), http.StatusForbidden},
	} {
		r, err := do(ctx, http.MethodPost, n.ingressURL()+tc.path, []byte(`"x"`), tc.header)
		if err != nil || r.status != tc.code {
			t.Fatalf("%s: %v %+v, want %d", tc.name, err, r, tc.code)
		}
		var body struct {
			Code   int    `json:"code"`
			Source string `json:"source"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Code != tc.code || body.Source != "ingress" {
			t.Fatalf("%s: error body %s", tc.name, r.body)
		}
		if tc.code == http.StatusUnauthorized && r.header.Get("www-authenticate") == "" {
			t.Fatalf("%s: no WWW-Authenticate", tc.name)
		}
	}
	if after := appliedIndexes(t, n); len(after) == 0 || !maps.Equal(before, after) {
		t.Fatalf("refused requests changed applied indexes: %v -> %v", before, after)
	}
	if distinct, _ := rec.stats(); distinct != 0 {
		t.Fatalf("refused requests were delivered: %d invocations", distinct)
	}

	r, err := do(ctx, http.MethodPost, n.ingressURL()+"/Echo/echo", []byte(`"hi"`), auth(authEchoToken))
	if err != nil || r.status != http.StatusOK || string(r.body) != `"hi"` {
		t.Fatalf("granted call: %v %+v", err, r)
	}
	id := r.header.Get("x-restate-id")
	// The CLI sends its --token (a call is a send and an attach for it:
	// the token must grant attach).
	out, err := exec.Command(binary, "invoke", "Echo/echo", `"cli"`, "--ingress", n.ingressURL(), "--token", authOpsToken).Output()
	if err != nil || strings.TrimSpace(string(out)) != `"cli"` {
		t.Fatalf("raftgate invoke --token: %v %q", err, out)
	}
	// echo-only may call but not read results; ops may.
	r, err = do(ctx, http.MethodGet, n.ingressURL()+"/restate/invocation/"+id+"/output", nil, auth(authEchoToken))
	if err != nil || r.status != http.StatusForbidden {
		t.Fatalf("output without the output permission: %v %+v", err, r)
	}
	r, err = do(ctx, http.MethodGet, n.ingressURL()+"/restate/invocation/"+id+"/output", nil, auth(authOpsToken))
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("output with the permission: %v %+v", err, r)
	}

	// Reload: echo-only revoked, a new token added.
	writeTokens(`
[[token]]
name = "ops"
token = "` + authOpsToken + `"
services = ["*"]

[[token]]
name = "new"
token = "` + authNewToken + `"
services = ["Echo"]
`)
	c.signal(n, syscall.SIGHUP)
	testutil.WaitFor(t, 10*time.Second, "the new token accepted after SIGHUP", func() bool {
		r, err := do(ctx, http.MethodPost, n.ingressURL()+"/Echo/echo", []byte(`"new"`), auth(authNewToken))
		return err == nil && r.status == http.StatusOK
	})
	r, err = do(ctx, http.MethodPost, n.ingressURL()+"/Echo/echo", []byte(`"old"`), auth(authEchoToken))
	if err != nil || r.status != http.StatusForbidden {
		t.Fatalf("revoked token after reload: %v %+v", err, r)
	}

	// A broken file is refused and the tokens in force stay.
	writeTokens("[[token]\nname = ")
	c.signal(n, syscall.SIGHUP)
	testutil.WaitFor(t, 10*time.Second, "the refused reload logged", func() bool {
		b, _ := os.ReadFile(n.logPath)
		return strings.Contains(string(b), "ingress tokens not reloaded")
	})
	r, err = do(ctx, http.MethodPost, n.ingressURL()+"/Echo/echo", []byte(`"kept"`), auth(authNewToken))
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("token after a refused reload: %v %+v", err, r)
	}
	logText, _ := os.ReadFile(n.logPath)
	for _, secret := range []string{authOpsToken, authEchoToken, authNewToken} {
		if strings.Contains(string(logText), secret) {
			t.Fatalf("the node's log holds a token")
		}
	}
	if !strings.Contains(string(logText), `"tokens":"ops,new"`) {
		t.Errorf("the reload did not log the token names")
	}
	if strings.Contains(string(logText), "without authentication") {
		t.Errorf("a node with --ingress-tokens warned that its ingress is open")
	}
}
