package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/callback"
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
		{ID: 3, NodeAddr: "127.0.0.1:5322", Alive: true},
	}
}

func (c testCluster) Partitions(bool) []admin.PartitionStatus {
	depth := 3
	first, last := invocation.KeyRange(2, 2)
	return []admin.PartitionStatus{
		{ID: 0, Leader: 1, Term: 2, AppliedIndex: 10, Replicas: []admin.ReplicaStatus{{NodeID: 1, Match: 10, Lag: new(uint64(0))}}},
		{ID: 1, LastKey: 1<<63 - 1, Leader: 1, Term: 5, AppliedIndex: 120, OutboxDepth: &depth,
			Replicas: []admin.ReplicaStatus{{NodeID: 1, Match: 120, Lag: new(uint64(0))}, {NodeID: 2, Match: 100, Lag: new(uint64(20)), State: "probe"},
				{NodeID: 3, Match: 90, Down: true}}},
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

func (r *testRegistry) CatchUp(ctx context.Context) error { return nil }

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
func (noInvocations) List(context.Context, uint32, *rpc.ListInvocations) (*rpc.InvocationList, error) {
	return &rpc.InvocationList{}, nil
}

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
		"NODE  ALIVE    INGRESS",
		"1     yes      127.0.0.1:8080  127.0.0.1:9070  127.0.0.1:5122  127.0.0.1:7946",
		"2     NO       -",
		"2 partitions, ready",
		"0          metadata",
		// Node 3 is still alive in gossip, but the leader does not hear
		// from it: suspect.
		"3     suspect  -",
		// Node 2 is not alive, node 3 not heard from: their lag is unknown.
		"1          0000000000000000-7fffffffffffffff  1       5     120      3       1:120/0 2:down(match 100, lag unknown) 3:down(match 90, lag unknown)",
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

// splitCluster is a view of a node that leads partition 1; partition 2 is
// led by node 3, whose admin API is at leaderAdmin.
type splitCluster struct{ leaderAdmin string }

func (c splitCluster) Nodes() []admin.NodeStatus {
	return []admin.NodeStatus{
		{ID: 1, AdminAddr: "127.0.0.1:9070", Alive: true},
		{ID: 2, Alive: true},
		{ID: 3, AdminAddr: c.leaderAdmin, Alive: true},
	}
}

func (c splitCluster) Partitions(bool) []admin.PartitionStatus {
	depth := 0
	return []admin.PartitionStatus{
		{ID: 1, Leader: 1, Term: 5, AppliedIndex: 9, OutboxDepth: &depth,
			Replicas: []admin.ReplicaStatus{{NodeID: 1, Match: 9, Lag: new(uint64(0))}, {NodeID: 2, Match: 9, Lag: new(uint64(0))}, {NodeID: 3, Match: 9, Lag: new(uint64(0))}}},
		{ID: 2, Leader: 3, Term: 6, AppliedIndex: 7},
	}
}

func (c splitCluster) Ready() bool { return true }

// TestStatusSaysWhatItCannotSee: a leader whose admin API refuses the
// request (it wants a token that was not given) or cannot be reached makes
// status say so and exit non-zero, after printing what it could see.
func TestStatusSaysWhatItCannotSee(t *testing.T) {
	leader := startAdmin(t, "tok", &testRegistry{svcs: map[string]*rpc.Service{}})
	for _, tc := range []struct {
		name, leaderAdmin, want string
	}{
		{"token wanted", strings.TrimPrefix(leader, "http://"), "node 3 leads partitions whose replicas and outbox are not shown: its admin API at " + leader + " refused (401 from admin"},
		{"unreachable", "127.0.0.1:1", "node 3 leads partitions whose replicas and outbox are not shown: admin API at http://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := admin.New(admin.Config{Cluster: splitCluster{leaderAdmin: tc.leaderAdmin}, Invocations: noInvocations{},
				Registry: &testRegistry{svcs: map[string]*rpc.Service{}}, Partitions: 2, Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			res := runCLI(t, "", "status", "--admin", srv.URL)
			if res.code == 0 || !strings.Contains(res.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want a non-zero exit saying %q", res.code, res.stderr, tc.want)
			}
			if !strings.Contains(res.stdout, "1:9/0 2:9/0 3:9/0") {
				t.Fatalf("what could be seen is not shown:\n%s", res.stdout)
			}
		})
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
	res = runCLI(t, "", "services", "add", "Flaky", "http://127.0.0.1:9081", "--max-attempts", "3", "--initial-backoff", "1s", "--admin", url)
	if s, ok := reg.Lookup("Flaky"); res.code != 0 || !ok || s.GetRetry().GetMaxAttempts() != 3 || s.GetRetry().GetInitialBackoffMs() != 1000 ||
		s.GetRetry().GetMaxBackoffMs() != 0 || !strings.Contains(res.stdout, "retry 3x 1s..") {
		t.Fatalf("add with a retry policy: %+v, registry has %v", res, s)
	}
	runCLI(t, "", "services", "rm", "Flaky", "--admin", url)
	runCLI(t, "", "services", "add", "Zeta", "https://z.example", "--kind", "object", "--shared", "get", "--admin", url)
	res = runCLI(t, "", "services", "ls", "--admin", url)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "Greeter  service  http://127.0.0.1:9080  greet,farewell  -") ||
		!strings.HasPrefix(lines[2], "Zeta     object   https://z.example      any             get") {
		t.Fatalf("list: %+v", res)
	}
	res = runCLI(t, "", "services", "ls", "--json", "--admin", url)
	var l admin.ServiceList
	if err := json.Unmarshal([]byte(res.stdout), &l); res.code != 0 || err != nil || len(l.Services) != 2 ||
		l.Services[1].Kind != "object" || len(l.Services[1].Shared) != 1 || l.Services[1].Shared[0] != "get" {
		t.Fatalf("list --json: %v %+v", err, res)
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

// services add --callback-url stores the default callback of a service,
// shown by show; an origin outside the allow-list is the admin's 400.
func TestServicesAddCallbackURL(t *testing.T) {
	reg := &testRegistry{svcs: map[string]*rpc.Service{}}
	allow, err := callback.ParseAllow([]string{"https://hooks.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Config{Cluster: testCluster{ready: true}, Invocations: noInvocations{}, Registry: reg,
		Partitions: 2, CallbackAllow: allow, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	res := runCLI(t, "", "services", "add", "Billing", "http://127.0.0.1:9080", "--callback-url", "https://hooks.example.com/billing", "--admin", srv.URL)
	if s, ok := reg.Lookup("Billing"); res.code != 0 || !ok || s.GetCallbackUrl() != "https://hooks.example.com/billing" {
		t.Fatalf("add --callback-url: %+v, registry has %v", res, s)
	}
	if res = runCLI(t, "", "services", "show", "Billing", "--admin", srv.URL); res.code != 0 || !strings.Contains(res.stdout, "callback url         https://hooks.example.com/billing") {
		t.Fatalf("show: %+v", res)
	}
	res = runCLI(t, "", "services", "add", "Leak", "http://127.0.0.1:9080", "--callback-url", "https://elsewhere.example.com/x", "--admin", srv.URL)
	if _, ok := reg.Lookup("Leak"); res.code == 0 || ok || !strings.Contains(res.stderr, "400") {
		t.Fatalf("add with an origin outside the allow-list: %+v", res)
	}
}

// invokeIngress records what invoke sent and answers like an ingress: a
// send of Greeter/H is accepted as invocation inv_H, whose attach answers
// by H (greet: the greeting; slow: not ready; fail: a recorded failure).
type invokeIngress struct {
	mu   sync.Mutex
	sent *http.Request // the last send
	body string        // its body
	last *http.Request // the last request
}

func (g *invokeIngress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.last = r
	if r.Method == http.MethodPost {
		g.sent, g.body = r, string(b)
	}
	g.mu.Unlock()
	if handler, ok := strings.CutPrefix(r.URL.Path, "/Greeter/"); ok && strings.HasSuffix(handler, "/send") {
		id := "inv_" + strings.TrimSuffix(handler, "/send")
		w.Header().Set("x-restate-id", id)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"invocationId":%q,"status":"Accepted","executionTime":"2026-01-01T00:00:10Z"}`, id)
		return
	}
	switch r.URL.Path {
	case "/restate/invocation/inv_greet/attach":
		w.Header().Set("x-restate-id", "inv_greet")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `"Hello, Ada!"`)
	case "/restate/invocation/inv_slow/attach":
		w.Header().Set("x-restate-id", "inv_slow")
		w.WriteHeader(470)
		io.WriteString(w, `{"code":470,"message":"not ready","source":"ingress"}`)
	case "/restate/invocation/inv_fail/attach":
		w.Header().Set("x-restate-id", "inv_fail")
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
	if res.code != 0 || res.stdout != "\"Hello, Ada!\"\n" || !strings.Contains(res.stderr, "invocation inv_greet: 200 OK") {
		t.Fatalf("call: %+v", res)
	}
	if g.body != `"Ada"` || g.sent.Header.Get("Content-Type") != "application/json" || g.sent.Header.Get("idempotency-key") != "k1" {
		t.Fatalf("sent %q %v", g.body, g.sent.Header)
	}

	res = runCLI(t, "Grace", "invoke", "Greeter/greet", "-", "--ingress", srv.URL, "--send", "--delay", "PT10S")
	if res.code != 0 || res.stdout != "inv_greet\n" || !strings.Contains(res.stderr, "Accepted, runs at 2026-01-01T00:00:10Z") {
		t.Fatalf("send: %+v", res)
	}
	if g.body != "Grace" || g.sent.URL.Query().Get("delay") != "10s" || !strings.HasPrefix(g.sent.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("sent %q to %v with %v", g.body, g.sent.URL, g.sent.Header)
	}

	res = runCLI(t, "", "invoke", "Greeter/fail", `"x"`, "--ingress", srv.URL)
	if res.code == 0 || res.stdout != "no such person\n" || !strings.Contains(res.stderr, "invocation inv_fail failed: 400") {
		t.Fatalf("failed invocation: %+v", res)
	}
	res = runCLI(t, "", "invoke", "Greeter/slow", "--ingress", srv.URL, "--timeout", "1s")
	if res.code == 0 || g.last.URL.Query().Get("timeout") != "1s" || !strings.Contains(res.stderr, "/restate/invocation/inv_slow/attach") {
		t.Fatalf("timed out call: %+v", res)
	}
	res = runCLI(t, "", "invoke", "Counter/add", "1", "--key", "a b", "--ingress", srv.URL)
	if g.sent.URL.EscapedPath() != "/Counter/a%20b/add/send" {
		t.Fatalf("keyed invocation sent to %s", g.sent.URL.EscapedPath())
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

// TestInvokeSaysWhatItWaitsFor: a call whose invocation is not answered
// at once says on stderr that it waits, and after which failed attempts,
// as the admin API tells them.
func TestInvokeSaysWhatItWaitsFor(t *testing.T) {
	release := make(chan struct{})
	ingress := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/Echo/echo/send":
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"invocationId":"inv_w","status":"Accepted"}`)
		case "/restate/invocation/inv_w/attach":
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("x-restate-id", "inv_w")
			io.WriteString(w, `"hi"`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ingress.Close)
	var polls atomic.Int32
	var releaseOnce sync.Once
	adminSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/invocations/inv_w" || r.Header.Get("Authorization") != "Bearer tok" {
			http.NotFound(w, r)
			return
		}
		n := polls.Add(1)
		if n >= 2 {
			defer releaseOnce.Do(func() { close(release) })
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"inv_w","status":"running","attempts":2,"lastError":"dial tcp 127.0.0.1:9999: connection refused","nextRetryAt":"2026-01-01T00:00:02Z"}`)
	}))
	t.Cleanup(adminSrv.Close)

	res := runCLI(t, "", "invoke", "Echo/echo", `"hi"`, "--ingress", ingress.URL, "--admin", adminSrv.URL, "--admin-token", "tok")
	if res.code != 0 || res.stdout != "\"hi\"\n" {
		t.Fatalf("call: %+v", res)
	}
	for _, want := range []string{
		"invocation inv_w: waiting for its result\n",
		"invocation inv_w: attempt 2 failed: dial tcp 127.0.0.1:9999: connection refused; next attempt at 2026-01-01T00:00:02Z\n",
	} {
		if strings.Count(res.stderr, want) != 1 {
			t.Errorf("stderr holds %q %d times, want once:\n%s", want, strings.Count(res.stderr, want), res.stderr)
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

// boltFileBytes returns the bytes of a small real bbolt database.
func boltFileBytes(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "src.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("state"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), bytes.Repeat([]byte("raftgate"), 4096))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// dirNames lists the names in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestBackupCommand(t *testing.T) {
	data := boltFileBytes(t)
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
	out := filepath.Join(dir, "state.db")

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
	if names := dirNames(t, dir); len(names) != 1 {
		t.Fatalf("after a failed copy the directory holds %v, want only state.db", names)
	}
}

// TestBackupChecksWhatItGets: an answer that is not a whole bbolt file
// fails the command and leaves nothing behind, and an output directory that
// cannot take the file fails before the node is asked.
func TestBackupChecksWhatItGets(t *testing.T) {
	good := boltFileBytes(t)
	corrupt := bytes.Clone(good)
	// Both meta pages (pages 0 and 1) keep their magic but lose their
	// checksums' agreement: bbolt refuses to open the file.
	for _, page := range []int{0, os.Getpagesize()} { // bbolt's default page size
		corrupt[page+boltMagicOffset+8] ^= 0xff
	}
	var asked atomic.Int32
	for _, tc := range []struct {
		name, want string
		serve      func(w http.ResponseWriter)
	}{
		{"empty 200", "0 bytes without bbolt's magic number", func(w http.ResponseWriter) {}},
		{"a web page", "bytes without bbolt's magic number", func(w http.ResponseWriter) {
			io.WriteString(w, "<html>hello</html>")
		}},
		{"corrupt meta pages", "bbolt cannot open it", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", strconv.Itoa(len(corrupt)))
			w.Write(corrupt)
		}},
		{"no length", "no Content-Length", func(w http.ResponseWriter) {
			w.Write(good[:100])
			w.(http.Flusher).Flush() // chunked: no length announced
			w.Write(good[100:])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.Add(1)
				tc.serve(w)
			}))
			t.Cleanup(srv.Close)
			dir := t.TempDir()
			res := runCLI(t, "", "backup", "--admin", srv.URL, "-o", filepath.Join(dir, "x.db"))
			if res.code == 0 || !strings.Contains(res.stderr, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want a failure saying %q", res.code, res.stdout, res.stderr, tc.want)
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Fatalf("a failed backup left %v", names)
			}
		})
	}

	asked.Store(0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Write(good)
	}))
	t.Cleanup(srv.Close)
	readOnly := t.TempDir()
	if err := os.Chmod(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(readOnly, 0o700) })
	outs := []string{filepath.Join(t.TempDir(), "missing", "x.db")}
	if os.Geteuid() != 0 { // root writes anywhere
		outs = append(outs, filepath.Join(readOnly, "x.db"))
	}
	for _, out := range outs {
		res := runCLI(t, "", "backup", "--admin", srv.URL, "-o", out)
		if res.code == 0 || !strings.Contains(res.stderr, "--output: cannot write there") {
			t.Errorf("-o %s: exit %d, stderr %q; want a failure naming --output", out, res.code, res.stderr)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the node was asked %d times for a copy that had nowhere to go", n)
	}
}
