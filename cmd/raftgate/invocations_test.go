package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// oneInvocation holds a single pending invocation in partition 1 of 1.
type oneInvocation struct {
	mu  sync.Mutex
	rec *rpc.InvocationRecord
}

func (o *oneInvocation) Status(_ context.Context, _ uint32, id []byte) (*rpc.InvocationRecord, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if string(id) != string(o.rec.Invoke.InvocationId) {
		return nil, rpc.ErrNotFound
	}
	return o.rec, nil
}

func (o *oneInvocation) Cancel(_ context.Context, _ uint32, id []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rec.State = rpc.InvocationRecord_COMPLETED
	o.rec.Result = &rpc.Result{Status: 409, Failed: true, Error: "cancelled"}
	return nil
}

func (o *oneInvocation) List(_ context.Context, _ uint32, req *rpc.ListInvocations) (*rpc.InvocationList, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if req.Service != "" && req.Service != o.rec.Invoke.Service {
		return &rpc.InvocationList{Scanned: 1}, nil
	}
	return &rpc.InvocationList{Records: []*rpc.InvocationRecord{o.rec}, Scanned: 1}, nil
}

func TestInvocationsCommands(t *testing.T) {
	id := invocation.Random()
	inv := &oneInvocation{rec: &rpc.InvocationRecord{
		Invoke: &rpc.Invoke{InvocationId: id.Bytes(), Service: "Greeter", Handler: "greet", IdempotencyKey: "k1",
			Body: []byte(`{"name":"Ada"}`), ContentType: "application/json"},
		State: rpc.InvocationRecord_PENDING, AcceptedAtUnixMs: 1_700_000_000_000,
	}}
	h, err := admin.New(admin.Config{Cluster: testCluster{ready: true}, Invocations: inv, Registry: &testRegistry{svcs: map[string]*rpc.Service{}},
		Partitions: 1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	res := runCLI(t, "", "invocations", "list", "--admin", srv.URL)
	if res.code != 0 || !strings.Contains(res.stdout, id.String()) || !strings.Contains(res.stdout, "Greeter/greet") ||
		!strings.Contains(res.stdout, "pending") || !strings.HasPrefix(res.stdout, "ID ") {
		t.Fatalf("list: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, "", "invocations", "list", "--service", "Other", "--admin", srv.URL)
	if res.code != 0 || !strings.Contains(res.stdout, "no invocations match") {
		t.Fatalf("filtered list: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, "", "invocations", "list", "--json", "--admin", srv.URL)
	var l admin.InvocationList
	if err := json.Unmarshal([]byte(res.stdout), &l); err != nil || len(l.Invocations) != 1 || l.Invocations[0].IdempotencyKey != "k1" {
		t.Fatalf("list --json: %v\n%s", err, res.stdout)
	}
	res = runCLI(t, "", "invocations", "show", id.String(), "--admin", srv.URL)
	if res.code != 0 || !strings.Contains(res.stdout, `{"name":"Ada"}`) || !strings.Contains(res.stdout, "partition        1 (leader: node 1)") {
		t.Fatalf("show: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, "", "invocations", "show", "inv_nope", "--admin", srv.URL)
	if res.code != 1 || !strings.Contains(res.stderr, "400 from admin: malformed invocation id") {
		t.Fatalf("show bad id: %d\n%s", res.code, res.stderr)
	}
	res = runCLI(t, "", "invocations", "cancel", id.String(), "--admin", srv.URL)
	if res.code != 0 || res.stdout != "cancelled "+id.String()+"\n" {
		t.Fatalf("cancel: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, "", "invocations", "list", "--since", "1h", "--after", "2024-01-01T00:00:00Z", "--admin", srv.URL)
	if res.code != 1 || !strings.Contains(res.stderr, "--since and --after") {
		t.Fatalf("since+after: %d\n%s", res.code, res.stderr)
	}
}
