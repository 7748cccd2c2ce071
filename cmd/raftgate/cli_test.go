package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// cliResult is what a command printed and its exit code.
type cliResult struct {
	stdout, stderr string
	code           int
}

func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := cliEnv{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr, lookupEnv: func(string) (string, bool) { return "", false }}
	code := run(context.Background(), args, env, nil)
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// testCluster is a fixed cluster view for the admin API.
type testCluster struct{ ready bool }

func (c testCluster) Nodes() []admin.NodeStatus {
	return []admin.NodeStatus{
		{ID: 1, IngressAddr: "127.0.0.1:8080", AdminAddr: "127.0.0.1:9070", NodeAddr: "127.0.0.1:5122", GossipAddr: "127.0.0.1:7946", Alive: true},
		{ID: 2, NodeAddr: "127.0.0.1:5222"},
	}
}

func (c testCluster) Partitions(bool) []admin.PartitionStatus {
	depth := 3
	first, last := invocation.KeyRange(2, 2)
	return []admin.PartitionStatus{
		{ID: 0, Leader: 1, Term: 2, AppliedIndex: 10},
		{ID: 1, LastKey: 1<<63 - 1, Leader: 1, Term: 5, AppliedIndex: 120, OutboxDepth: &depth,
			Replicas: []admin.ReplicaStatus{{NodeID: 1, Match: 120}, {NodeID: 2, Match: 100, Lag: 20, State: "probe"}}},
		{ID: 2, FirstKey: first, LastKey: last, Term: 6, AppliedIndex: 7},
	}
}

func (c testCluster) Ready() bool { return c.ready }

// testRegistry is an in-memory registry.
type testRegistry struct {
	mu   sync.Mutex
	svcs map[string]*rpc.Service
}

func (r *testRegistry) PutService(ctx context.Context, s *rpc.Service) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.svcs[s.Name] = s
	return nil
}

func (r *testRegistry) DeleteService(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.svcs[name]; !ok {
		return rpc.ErrNotFound
	}
	delete(r.svcs, name)
	return nil
}

func (r *testRegistry) Lookup(name string) (*rpc.Service, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.svcs[name]
	return s, ok
}

func (r *testRegistry) List() []*rpc.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*rpc.Service
	for _, s := range r.svcs {
		out = append(out, s)
	}
	return out
}

// noInvocations finds nothing.
type noInvocations struct{}

func (noInvocations) Status(context.Context, uint32, []byte) (*rpc.InvocationRecord, error) {
	return nil, rpc.ErrNotFound
}
func (noInvocations) Cancel(context.Context, uint32, []byte) error { return rpc.ErrNotFound }

// startAdmin serves the real admin API over fakes.
func startAdmin(t *testing.T, token string, reg *testRegistry) string {
	t.Helper()
	h, err := admin.New(admin.Config{Cluster: testCluster{ready: true}, Invocations: noInvocations{}, Registry: reg,
		Partitions: 2, Token: token, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestStatusTable(t *testing.T) {
	url := startAdmin(t, "tok", &testRegistry{svcs: map[string]*rpc.Service{}})
	res := runCLI(t, "", "status", "--admin", strings.TrimPrefix(url, "http://"), "--admin-token", "tok")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	for _, want := range []string{
		"NODE  ALIVE  INGRESS",
		"1     yes    127.0.0.1:8080  127.0.0.1:9070  127.0.0.1:5122  127.0.0.1:7946",
		"2     NO     -",
		"2 partitions, ready",
		"0          metadata",
		"1          0000000000000000-7fffffffffffffff  1       5     120      3       1:120/0 2:100/20(probe)",
		"2          8000000000000000-ffffffffffffffff  none    6     7        -       -",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, res.stdout)
		}
	}

	t.Log("\n" + res.stdout)
	res = runCLI(t, "", "status", "--admin", url)
	if res.code == 0 || !strings.Contains(res.stderr, "401 from admin: missing or wrong admin token") {
		t.Fatalf("without token: exit %d, %q", res.code, res.stderr)
	}
	res = runCLI(t, "", "status", "--admin", "http://127.0.0.1:1")
	if res.code == 0 || !strings.Contains(res.stderr, "admin API at http://127.0.0.1:1") {
		t.Fatalf("unreachable admin: exit %d, %q", res.code, res.stderr)
	}
}

func TestServicesCommands(t *testing.T) {
	reg := &testRegistry{svcs: map[string]*rpc.Service{}}
	url := startAdmin(t, "", reg)

	res := runCLI(t, "", "services", "list", "--admin", url)
	if res.code != 0 || !strings.Contains(res.stdout, "no services registered") {
		t.Fatalf("empty list: %+v", res)
	}
	res = runCLI(t, "", "services", "add", "Greeter", "http://127.0.0.1:9080/", "--handlers", "greet,farewell", "--admin", url)
	if res.code != 0 || !strings.Contains(res.stdout, "registered Greeter at http://127.0.0.1:9080 (handlers: greet,farewell)") {
		t.Fatalf("add: %+v", res)
	}
	if s, ok := reg.Lookup("Greeter"); !ok || s.Url != "http://127.0.0.1:9080" || len(s.Handlers) != 2 {
		t.Fatalf("registry has %v", s)
	}
	runCLI(t, "", "services", "add", "Zeta", "https://z.example", "--admin", url)
	res = runCLI(t, "", "services", "ls", "--admin", url)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "Greeter  http://127.0.0.1:9080  greet,farewell") ||
		!strings.HasPrefix(lines[2], "Zeta     https://z.example      any") {
		t.Fatalf("list: %+v", res)
	}
	res = runCLI(t, "", "services", "add", "Bad", "ftp://x", "--admin", url)
	if res.code == 0 || !strings.Contains(res.stderr, "add service Bad: 400 from admin") {
		t.Fatalf("bad add: %+v", res)
	}
	if res = runCLI(t, "", "services", "rm", "Zeta", "--admin", url); res.code != 0 || !strings.Contains(res.stdout, "removed Zeta") {
		t.Fatalf("rm: %+v", res)
	}
	if res = runCLI(t, "", "services", "rm", "Zeta", "--admin", url); res.code == 0 || !strings.Contains(res.stderr, "404") {
		t.Fatalf("rm again: %+v", res)
	}
	if res = runCLI(t, "", "services", "add", "OnlyName", "--admin", url); res.code == 0 {
		t.Fatalf("add without URL accepted: %+v", res)
	}
}

// invokeIngress records what invoke sent and answers like an ingress.
type invokeIngress struct {
	mu   sync.Mutex
	last *http.Request
	body string
}

func (g *invokeIngress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.last, g.body = r, string(b)
	g.mu.Unlock()
	switch r.URL.Path {
	case "/Greeter/greet":
		w.Header().Set("x-restate-id", "inv_1")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `"Hello, Ada!"`)
	case "/Greeter/greet/send":
		w.Header().Set("x-restate-id", "inv_2")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"invocationId":"inv_2","status":"Accepted","executionTime":"2026-01-01T00:00:10Z"}`)
	case "/Greeter/slow":
		w.Header().Set("x-restate-id", "inv_4")
		w.WriteHeader(470)
		io.WriteString(w, `{"code":470,"message":"not ready","source":"ingress"}`)
	case "/Greeter/fail":
		w.Header().Set("x-restate-id", "inv_3")
		w.Header().Set("x-restate-error-source", "invocation")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, "no such person")
	default:
		w.Header().Set("x-restate-error-source", "ingress")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"code":404,"message":"service Nope is not registered","source":"ingress"}`)
	}
}

func TestInvoke(t *testing.T) {
	g := &invokeIngress{}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)

	res := runCLI(t, "", "invoke", "Greeter/greet", `"Ada"`, "--ingress", srv.URL, "--idempotency-key", "k1")
	if res.code != 0 || res.stdout != "\"Hello, Ada!\"\n" || !strings.Contains(res.stderr, "invocation inv_1: 200 OK") {
		t.Fatalf("call: %+v", res)
	}
	if g.body != `"Ada"` || g.last.Header.Get("Content-Type") != "application/json" || g.last.Header.Get("idempotency-key") != "k1" {
		t.Fatalf("sent %q %v", g.body, g.last.Header)
	}

	res = runCLI(t, "Grace", "invoke", "Greeter/greet", "-", "--ingress", srv.URL, "--send", "--delay", "PT10S")
	if res.code != 0 || res.stdout != "inv_2\n" || !strings.Contains(res.stderr, "Accepted, runs at 2026-01-01T00:00:10Z") {
		t.Fatalf("send: %+v", res)
	}
	if g.body != "Grace" || g.last.URL.Query().Get("delay") != "PT10S" || !strings.HasPrefix(g.last.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("sent %q to %v with %v", g.body, g.last.URL, g.last.Header)
	}

	res = runCLI(t, "", "invoke", "Greeter/fail", `"x"`, "--ingress", srv.URL)
	if res.code == 0 || res.stdout != "no such person\n" || !strings.Contains(res.stderr, "invocation inv_3 failed: 400") {
		t.Fatalf("failed invocation: %+v", res)
	}
	res = runCLI(t, "", "invoke", "Greeter/slow", "--ingress", srv.URL, "--timeout", "1s")
	if res.code == 0 || g.last.Header.Get("x-raftgate-timeout") != "1s" || !strings.Contains(res.stderr, "/restate/invocation/inv_4/attach") {
		t.Fatalf("timed out call: %+v", res)
	}
	res = runCLI(t, "", "invoke", "Nope/x", "--ingress", srv.URL)
	if res.code == 0 || !strings.Contains(res.stderr, "404 from ingress: service Nope is not registered") {
		t.Fatalf("unknown service: %+v", res)
	}
	for _, args := range [][]string{
		{"invoke", "Greeter", "--ingress", srv.URL},
		{"invoke", "Greeter/greet", "--delay", "10s", "--ingress", srv.URL},
	} {
		if res := runCLI(t, "", args...); res.code == 0 {
			t.Fatalf("%v accepted: %+v", args, res)
		}
	}
}

// TestInvokeRefusesEmptyIdempotencyKey: an explicitly empty key is an
// error before anything is sent, not a request without a key.
func TestInvokeRefusesEmptyIdempotencyKey(t *testing.T) {
	g := &invokeIngress{}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	for _, args := range [][]string{
		{"invoke", "Greeter/greet", `"Ada"`, "--ingress", srv.URL, "--idempotency-key", ""},
		{"invoke", "Greeter/greet", `"Ada"`, "--ingress", srv.URL, "--send", "--idempotency-key="},
		{"invoke", "Greeter/greet", `"Ada"`, "--ingress", srv.URL, "--idempotency-key", " "},
	} {
		res := runCLI(t, "", args...)
		if res.code == 0 || !strings.Contains(res.stderr, "--idempotency-key: empty") {
			t.Errorf("%q: %+v, want a non-zero exit naming --idempotency-key", args, res)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last != nil {
		t.Fatalf("sent %s %s with an empty key; want nothing sent", g.last.Method, g.last.URL)
	}
}

// TestEnvReachesInheritedFlags: RAFTGATE_ADMIN and RAFTGATE_ADMIN_TOKEN
// fill --admin/--admin-token, which subcommands inherit from `services`.
func TestEnvReachesInheritedFlags(t *testing.T) {
	reg := &testRegistry{svcs: map[string]*rpc.Service{"Greeter": {Name: "Greeter", Url: "http://g"}}}
	url := startAdmin(t, "tok", reg)
	var stdout, stderr bytes.Buffer
	vars := map[string]string{"RAFTGATE_ADMIN": url, "RAFTGATE_ADMIN_TOKEN": "tok"}
	env := cliEnv{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
	if code := run(context.Background(), []string{"services", "list"}, env, nil); code != 0 || !strings.Contains(stdout.String(), "http://g") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

func TestBackupCommand(t *testing.T) {
	data := bytes.Repeat([]byte("raftgate"), 4096)
	cut := false
	h, err := admin.New(admin.Config{Cluster: testCluster{ready: true}, Invocations: noInvocations{},
		Registry: &testRegistry{svcs: map[string]*rpc.Service{}}, Partitions: 2, Token: "tok", Logger: zerolog.Nop(),
		Backup: func(w io.Writer, size func(int64)) (int64, error) {
			size(int64(len(data)))
			if cut {
				n, _ := w.Write(data[:len(data)/2])
				w.(http.Flusher).Flush()
				return int64(n), errors.New("disk read failed")
			}
			n, err := w.Write(data)
			return int64(n), err
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	out := filepath.Join(dir, "raft.db")

	res := runCLI(t, "", "backup", "--admin", srv.URL, "--admin-token", "tok", "-o", out)
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("wrote %d bytes", len(data))) {
		t.Fatalf("backup: exit %d, %q %q", res.code, res.stdout, res.stderr)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("backup file: %d bytes, %v", len(got), err)
	}
	res = runCLI(t, "", "backup", "--admin", srv.URL, "--admin-token", "tok", "-o", out)
	if res.code == 0 || !strings.Contains(res.stderr, "exists; not overwriting") {
		t.Fatalf("over an existing file: exit %d, %q", res.code, res.stderr)
	}
	res = runCLI(t, "", "backup", "--admin", srv.URL, "-o", filepath.Join(dir, "b.db"))
	if res.code == 0 || !strings.Contains(res.stderr, "401") {
		t.Fatalf("without token: exit %d, %q", res.code, res.stderr)
	}
	if res = runCLI(t, "", "backup", "--admin", srv.URL); res.code == 0 || !strings.Contains(res.stderr, "--output") {
		t.Fatalf("without --output: exit %d, %q", res.code, res.stderr)
	}

	// A copy cut short leaves no file behind, not even a partial one.
	cut = true
	res = runCLI(t, "", "backup", "--admin", srv.URL, "--admin-token", "tok", "-o", filepath.Join(dir, "cut.db"))
	if res.code == 0 || !strings.Contains(res.stderr, "cut short") {
		t.Fatalf("cut short: exit %d, %q", res.code, res.stderr)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("after a failed copy the directory holds %v, want only raft.db", names)
	}
}
