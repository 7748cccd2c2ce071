package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// fakeCluster is a fixed cluster view.
type fakeCluster struct {
	nodes      []NodeStatus
	partitions []PartitionStatus
	ready      bool
}

func (c *fakeCluster) Nodes() []NodeStatus               { return c.nodes }
func (c *fakeCluster) Partitions(bool) []PartitionStatus { return c.partitions }
func (c *fakeCluster) Ready() bool                       { return c.ready }

// fakeInvocations stores records by id and remembers the partition each
// call was routed to.
type fakeInvocations struct {
	mu         sync.Mutex
	records    map[string]*rpc.InvocationRecord
	err        error // returned by every call when set
	statusErr  error // returned by Status when set
	partitions []uint32
}

func (f *fakeInvocations) Status(ctx context.Context, p uint32, id []byte) (*rpc.InvocationRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partitions = append(f.partitions, p)
	if f.err != nil {
		return nil, f.err
	}
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	rec, ok := f.records[string(id)]
	if !ok {
		return nil, rpc.ErrNotFound
	}
	return rec, nil
}

func (f *fakeInvocations) Cancel(ctx context.Context, p uint32, id []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partitions = append(f.partitions, p)
	if f.err != nil {
		return f.err
	}
	rec, ok := f.records[string(id)]
	if !ok {
		return rpc.ErrNotFound
	}
	if rec.State != rpc.InvocationRecord_COMPLETED {
		rec.State = rpc.InvocationRecord_COMPLETED
		rec.Result = &rpc.Result{Status: 409, Failed: true, Error: "cancelled"}
		rec.CompletedAtUnixMs = 1_700_000_001_000
	}
	return nil
}

// fakeRegistry is an in-memory registry.
type fakeRegistry struct {
	mu       sync.Mutex
	services map[string]*rpc.Service
	err      error // returned by Put/Delete when set
	catchUp  error // returned by CatchUp
}

func (f *fakeRegistry) CatchUp(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.catchUp
}

func (f *fakeRegistry) PutService(ctx context.Context, svc *rpc.Service) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.services[svc.Name] = svc
	return nil
}

func (f *fakeRegistry) DeleteService(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if _, ok := f.services[name]; !ok {
		return rpc.ErrNotFound
	}
	delete(f.services, name)
	return nil
}

func (f *fakeRegistry) Lookup(name string) (*rpc.Service, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	svc, ok := f.services[name]
	return svc, ok
}

func (f *fakeRegistry) List() []*rpc.Service {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*rpc.Service
	for _, s := range f.services {
		out = append(out, s)
	}
	return out
}

type fixture struct {
	url         string
	cluster     *fakeCluster
	invocations *fakeInvocations
	registry    *fakeRegistry
}

const testPartitions = 4

func newFixture(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	f := &fixture{
		cluster:     &fakeCluster{ready: true},
		invocations: &fakeInvocations{records: map[string]*rpc.InvocationRecord{}},
		registry:    &fakeRegistry{services: map[string]*rpc.Service{}},
	}
	cfg := Config{
		Cluster: f.cluster, Invocations: f.invocations, Registry: f.registry,
		Partitions: testPartitions,
		Now:        func() time.Time { return time.UnixMilli(1_700_000_000_000) },
		Logger:     zerolog.Nop(),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (f *fixture) do(t *testing.T, method, path, body string, header ...string) answer {
	t.Helper()
	r := testutil.Do(t, method, f.url+path, body, header...)
	return answer{status: r.Status, header: r.Header, body: r.Body}
}

// wantError checks the status and the JSON error shape.
func wantError(t *testing.T, a answer, status int, msgContains string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d (body %s)", a.status, status, a.body)
	}
	var e errorBody
	if err := json.Unmarshal(a.body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", a.body, err)
	}
	if e.Code != status || e.Source != "admin" {
		t.Fatalf("error body %+v: want code %d and source admin", e, status)
	}
	if !strings.Contains(e.Message, msgContains) {
		t.Fatalf("error message %q does not contain %q", e.Message, msgContains)
	}
}

func decode[T any](t *testing.T, a answer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	return v
}

func TestNewValidatesConfig(t *testing.T) {
	ok := Config{Cluster: &fakeCluster{}, Invocations: &fakeInvocations{}, Registry: &fakeRegistry{}, Partitions: 1}
	cases := map[string]func(*Config){
		"Cluster":        func(c *Config) { c.Cluster = nil },
		"Invocations":    func(c *Config) { c.Invocations = nil },
		"Registry":       func(c *Config) { c.Registry = nil },
		"Partitions":     func(c *Config) { c.Partitions = 0 },
		"RequestTimeout": func(c *Config) { c.RequestTimeout = -1 },
	}
	for field, mutate := range cases {
		cfg := ok
		mutate(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v, want ErrInvalidConfig naming the field", field, err)
		}
	}
	if _, err := New(ok); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

func TestServiceLifecycle(t *testing.T) {
	f := newFixture(t, nil)

	a := f.do(t, "PUT", "/services/Greeter", `{"url":"http://127.0.0.1:9080/","handlers":["greet","farewell"]}`)
	if a.status != http.StatusCreated {
		t.Fatalf("first PUT: %d %s", a.status, a.body)
	}
	v := decode[ServiceView](t, a)
	if v.URL != "http://127.0.0.1:9080" || !slices.Equal(v.Handlers, []string{"greet", "farewell"}) || v.UpdatedAt != "2023-11-14T22:13:20.000Z" {
		t.Fatalf("PUT answer %+v", v)
	}
	if got := f.registry.services["Greeter"]; got.GetUrl() != "http://127.0.0.1:9080" || got.GetUpdatedAtUnixMs() != 1_700_000_000_000 {
		t.Fatalf("stored %v", got)
	}

	a = f.do(t, "PUT", "/services/Greeter", `{"name":"Greeter","url":"https://svc.example:8443/base"}`)
	if a.status != http.StatusOK {
		t.Fatalf("update PUT: %d %s", a.status, a.body)
	}
	if v := decode[ServiceView](t, a); len(v.Handlers) != 0 || v.URL != "https://svc.example:8443/base" {
		t.Fatalf("update answer %+v", v)
	}

	f.do(t, "PUT", "/services/Alpha", `{"url":"http://127.0.0.1:1"}`)
	list := decode[ServiceList](t, f.do(t, "GET", "/services", ""))
	if len(list.Services) != 2 || list.Services[0].Name != "Alpha" || list.Services[1].Name != "Greeter" {
		t.Fatalf("list %+v", list)
	}
	if v := decode[ServiceView](t, f.do(t, "GET", "/services/Alpha", "")); v.URL != "http://127.0.0.1:1" {
		t.Fatalf("get %+v", v)
	}

	if a := f.do(t, "DELETE", "/services/Alpha", ""); a.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	wantError(t, f.do(t, "GET", "/services/Alpha", ""), 404, `service "Alpha" is not registered`)
	wantError(t, f.do(t, "DELETE", "/services/Alpha", ""), 404, `service "Alpha" is not registered`)
}

func TestPutServiceRejectsBadInput(t *testing.T) {
	f := newFixture(t, nil)
	cases := []struct{ path, body, msg string }{
		{"/services/bad%20name", `{"url":"http://h"}`, "service name"},
		{"/services/%2E%2E", `{"url":"http://h"}`, "not only dots"},
		{"/services/%2E", `{"url":"http://h"}`, "not only dots"},
		{"/services/ok", ``, "body must be JSON"},
		{"/services/ok", `not json`, "not a service registration"},
		{"/services/ok", `{"url":"http://h","extra":1}`, "unknown field"},
		{"/services/ok", `{"url":"http://h"} {}`, "data after"},
		{"/services/ok", `{"handlers":["a"]}`, `"url" is required`},
		{"/services/ok", `{"url":"ftp://h"}`, "http:// or https://"},
		{"/services/ok", `{"url":"/relative"}`, "http:// or https://"},
		{"/services/ok", `{"url":"http://"}`, "no host"},
		{"/services/ok", `{"url":"http://h?x=1"}`, "query or fragment"},
		{"/services/ok", `{"url":"http://h","handlers":["1st"]}`, "handler name"},
		{"/services/ok", `{"url":"http://h","handlers":["a-b"]}`, "handler name"},
		{"/services/ok", `{"url":"http://h","handlers":["a","a"]}`, "listed twice"},
		{"/services/ok", `{"name":"other","url":"http://h"}`, "path names"},
	}
	for _, c := range cases {
		wantError(t, f.do(t, "PUT", c.path, c.body), http.StatusBadRequest, c.msg)
	}
	wantError(t, f.do(t, "PUT", "/services/big", `{"url":"http://h","handlers":["`+strings.Repeat("a", maxServiceBody)+`"]}`),
		http.StatusRequestEntityTooLarge, "body over")
	if len(f.registry.services) != 0 {
		t.Fatalf("bad input reached the registry: %v", f.registry.services)
	}
}

func TestRegistryErrorsMapToStatus(t *testing.T) {
	f := newFixture(t, nil)
	f.registry.err = &rpc.NotLeaderError{Leader: 2, Term: 5}
	a := f.do(t, "PUT", "/services/Greeter", `{"url":"http://h"}`)
	wantError(t, a, http.StatusServiceUnavailable, "retrying is safe")
	if a.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	f.registry.err = errors.New("disk on fire")
	wantError(t, f.do(t, "DELETE", "/services/Greeter", ""), http.StatusInternalServerError, "disk on fire")
	f.registry.err = rpc.ErrOverloaded
	wantError(t, f.do(t, "PUT", "/services/Greeter", `{"url":"http://h"}`), http.StatusTooManyRequests, "overloaded")
}

func TestMethodsAndUnknownPaths(t *testing.T) {
	f := newFixture(t, nil)
	a := f.do(t, "POST", "/services", "{}")
	wantError(t, a, http.StatusMethodNotAllowed, "POST not allowed")
	if got := a.header.Get("Allow"); got != "GET, HEAD" {
		t.Fatalf("Allow %q", got)
	}
	a = f.do(t, "POST", "/services/x", "{}")
	wantError(t, a, http.StatusMethodNotAllowed, "not allowed")
	if got := a.header.Get("Allow"); got != "GET, HEAD, PUT, DELETE" {
		t.Fatalf("Allow %q", got)
	}
	wantError(t, f.do(t, "PUT", "/cluster", "{}"), http.StatusMethodNotAllowed, "not allowed")
	wantError(t, f.do(t, "GET", "/nope", ""), http.StatusNotFound, "no admin endpoint /nope")
	wantError(t, f.do(t, "GET", "/services/a/b", ""), http.StatusNotFound, "no admin endpoint")
	wantError(t, f.do(t, "GET", "/debug/pprof/", ""), http.StatusNotFound, "no admin endpoint")
	wantError(t, f.do(t, "GET", "/metrics", ""), http.StatusNotFound, "metrics are not enabled")
}

func TestClusterView(t *testing.T) {
	f := newFixture(t, nil)
	depth := 7
	first, last := invocation.KeyRange(2, testPartitions)
	f.cluster.nodes = []NodeStatus{{ID: 1, IngressAddr: "127.0.0.1:8080", NodeAddr: "127.0.0.1:5122", Alive: true}, {ID: 2}}
	f.cluster.partitions = []PartitionStatus{
		{ID: 1, Leader: 1, Term: 3, AppliedIndex: 42, Replicas: []ReplicaStatus{{NodeID: 1, Match: 42}, {NodeID: 2, Match: 40, Lag: new(uint64(2))}}, OutboxDepth: &depth},
		{ID: 2, FirstKey: first, LastKey: last, Leader: 2, Term: 4},
	}
	a := f.do(t, "GET", "/cluster", "")
	v := decode[ClusterView](t, a)
	if !v.Ready || len(v.Nodes) != 2 || !v.Nodes[0].Alive || v.Nodes[1].Alive {
		t.Fatalf("view %+v", v)
	}
	p1, p2 := v.Partitions[0], v.Partitions[1]
	if p1.OutboxDepth == nil || *p1.OutboxDepth != 7 || p1.Replicas[1].Lag == nil || *p1.Replicas[1].Lag != 2 || p2.OutboxDepth != nil || p2.Replicas == nil {
		t.Fatalf("partitions %+v", v.Partitions)
	}
	if p2.FirstKey != first || p2.LastKey != last {
		t.Fatalf("key range %x-%x, want %x-%x", p2.FirstKey, p2.LastKey, first, last)
	}
	// Keys travel as strings so that JavaScript clients keep all 64 bits.
	if !strings.Contains(string(a.body), `"lastKey": "`) {
		t.Fatalf("lastKey not a string: %s", a.body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	f := newFixture(t, nil)
	if a := f.do(t, "GET", "/healthz", ""); a.status != 200 {
		t.Fatalf("healthz %d", a.status)
	}
	if a := f.do(t, "GET", "/readyz", ""); a.status != 200 {
		t.Fatalf("readyz ready %d", a.status)
	}
	f.cluster.ready = false
	a := f.do(t, "GET", "/readyz", "")
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Fatalf("readyz not ready: %d %v", a.status, a.header)
	}
	if a := f.do(t, "GET", "/healthz", ""); a.status != 200 {
		t.Fatalf("healthz while not ready %d", a.status)
	}
}

func TestBearerToken(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Token = "s3cret" })
	wantError(t, f.do(t, "GET", "/cluster", ""), http.StatusUnauthorized, "admin token")
	wantError(t, f.do(t, "GET", "/cluster", "", "Authorization", "Bearer wrong"), http.StatusUnauthorized, "admin token")
	wantError(t, f.do(t, "GET", "/cluster", "", "Authorization", "s3cret"), http.StatusUnauthorized, "admin token")
	wantError(t, f.do(t, "GET", "/nope", ""), http.StatusUnauthorized, "admin token")
	if a := f.do(t, "GET", "/cluster", ""); !strings.Contains(string(a.body), "Bearer <token>") {
		t.Errorf("401 body not readable as is: %s", a.body)
	}
	if a := f.do(t, "GET", "/cluster", "", "Authorization", "Bearer s3cret"); a.status != 200 {
		t.Fatalf("with token: %d %s", a.status, a.body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if a := f.do(t, "GET", p, ""); a.status != 200 {
			t.Fatalf("%s without token: %d", p, a.status)
		}
	}
}

func TestMetricsAndPprof(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "raftgate_up 1\n") })
	f := newFixture(t, func(c *Config) { c.Metrics = metrics; c.EnablePprof = true })
	if a := f.do(t, "GET", "/metrics", ""); a.status != 200 || string(a.body) != "raftgate_up 1\n" {
		t.Fatalf("metrics %d %q", a.status, a.body)
	}
	if a := f.do(t, "GET", "/debug/pprof/", ""); a.status != 200 || !strings.Contains(string(a.body), "goroutine") {
		t.Fatalf("pprof %d", a.status)
	}
}

func TestInvocationStatusAndCancel(t *testing.T) {
	f := newFixture(t, nil)
	id := invocation.Idempotent("Greeter", "greet", "k1")
	wantPartition := invocation.PartitionFor(id.PartitionKey(), testPartitions)
	f.invocations.records[string(id.Bytes())] = &rpc.InvocationRecord{
		Invoke: &rpc.Invoke{Service: "Greeter", Handler: "greet", IdempotencyKey: "k1",
			ProposedAtUnixMs: 1_700_000_000_000, NotBeforeUnixMs: 1_700_000_010_000},
		State:            rpc.InvocationRecord_RUNNING,
		Attempts:         2,
		LastError:        "connection refused",
		RetryAtUnixMs:    1_700_000_000_500,
		AcceptedAtUnixMs: 1_700_000_000_000,
	}

	v := decode[InvocationView](t, f.do(t, "GET", "/invocations/"+id.String(), ""))
	if v.Request == nil || v.Request.BodyBytes != 0 {
		t.Fatalf("request body view %+v, want an empty one", v.Request)
	}
	v.Request = nil
	want := InvocationView{ID: id.String(), Partition: wantPartition, Service: "Greeter", Handler: "greet", IdempotencyKey: "k1",
		Status: "running", Attempts: 2, LastError: "connection refused", AcceptedAt: "2023-11-14T22:13:20.000Z",
		ExecutionTime: "2023-11-14T22:13:30.000Z", NextRetryAt: "2023-11-14T22:13:20.500Z"}
	if v != want {
		t.Fatalf("status\n got %+v\nwant %+v", v, want)
	}

	a := f.do(t, "DELETE", "/invocations/"+id.String(), "")
	if a.status != 200 {
		t.Fatalf("cancel %d %s", a.status, a.body)
	}
	v = decode[InvocationView](t, a)
	if v.Status != "completed" || v.Result == nil || !v.Result.Failed || v.Result.Error != "cancelled" || v.NextRetryAt != "" ||
		v.CompletedAt != "2023-11-14T22:13:21.000Z" {
		t.Fatalf("after cancel %+v result %+v", v, v.Result)
	}
	// The cancel applied but the status read after it failed: 202.
	f.invocations.statusErr = rpc.ErrUnavailable
	a = f.do(t, "DELETE", "/invocations/"+id.String(), "")
	if v := decode[InvocationView](t, a); a.status != http.StatusAccepted || v.ID != id.String() || v.Status != "completed" {
		t.Fatalf("cancel without status: %d %s", a.status, a.body)
	}
	for _, p := range f.invocations.partitions {
		if p != wantPartition {
			t.Fatalf("routed to partition %d, want %d", p, wantPartition)
		}
	}

	// A result's own delivery counts: two failures, then success on the third.
	f.invocations.statusErr = nil
	done := invocation.Idempotent("Greeter", "greet", "k2")
	f.invocations.records[string(done.Bytes())] = &rpc.InvocationRecord{
		Invoke: &rpc.Invoke{Service: "Greeter", Handler: "greet"}, State: rpc.InvocationRecord_COMPLETED,
		Attempts: 2, Result: &rpc.Result{Status: 200, Attempts: 3},
	}
	if v := decode[InvocationView](t, f.do(t, "GET", "/invocations/"+done.String(), "")); v.Attempts != 3 {
		t.Fatalf("completed on the third delivery: attempts %d, want 3", v.Attempts)
	}
}

func TestInvocationErrors(t *testing.T) {
	f := newFixture(t, nil)
	wantError(t, f.do(t, "GET", "/invocations/nope", ""), http.StatusBadRequest, "malformed invocation id")
	wantError(t, f.do(t, "DELETE", "/invocations/inv_abc", ""), http.StatusBadRequest, "malformed invocation id")
	id := invocation.Random().String()
	wantError(t, f.do(t, "GET", "/invocations/"+id, ""), http.StatusNotFound, "not found")
	wantError(t, f.do(t, "DELETE", "/invocations/"+id, ""), http.StatusNotFound, "not found")
	f.invocations.err = rpc.ErrUnavailable
	a := f.do(t, "GET", "/invocations/"+id, "")
	wantError(t, a, http.StatusServiceUnavailable, "retrying is safe")
	if a.header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", a.header.Get("Retry-After"))
	}
	f.invocations.err = &rpc.NotLeaderError{}
	wantError(t, f.do(t, "DELETE", "/invocations/"+id, ""), http.StatusServiceUnavailable, "not leader")
}

func TestResultSummaryTruncatesText(t *testing.T) {
	body := []byte(strings.Repeat("é", maxBodyPreview)) // 2 bytes each: the cut falls mid-rune
	s := resultSummary(&rpc.Result{Status: 200, Body: body, ContentType: "text/plain"}, false)
	if !s.BodyTruncated || s.BodyBytes != len(body) || len(s.Body) == 0 || len(s.Body) > maxBodyPreview {
		t.Fatalf("summary %+v", s)
	}
	if s := resultSummary(&rpc.Result{Body: []byte{0xff, 0xfe}}, false); s.Body != "" || s.BodyBase64 != "//4=" || s.BodyBytes != 2 {
		t.Fatalf("binary body shown as text: %+v", s)
	}
	if s := resultSummary(&rpc.Result{Body: body}, true); s.BodyTruncated || s.Body != string(body) {
		t.Fatalf("full body cut: %d of %d bytes", len(s.Body), len(body))
	}
}

func TestBackup(t *testing.T) {
	wantError(t, newFixture(t, nil).do(t, "GET", "/backup", ""), http.StatusNotFound, "backup is not enabled")

	data := []byte(strings.Repeat("page", 1024))
	var copied int // bytes the last copy got out
	f := newFixture(t, func(c *Config) {
		c.Token = "s3cret"
		c.Backup = func(w io.Writer, size func(int64)) (int64, error) {
			size(int64(len(data)))
			n, err := w.Write(data)
			copied = n
			if err != nil {
				// As bbolt's Tx.WriteTo does: the writer's error, unwrapped.
				err = fmt.Errorf("meta 0 copy: %s", err)
			}
			return int64(n), err
		}
	})
	wantError(t, f.do(t, "GET", "/backup", ""), http.StatusUnauthorized, "admin token")
	a := f.do(t, "GET", "/backup", "", "Authorization", "Bearer s3cret")
	if a.status != 200 || string(a.body) != string(data) {
		t.Fatalf("backup: %d, %d bytes", a.status, len(a.body))
	}
	if got := a.header.Get("Content-Length"); got != "4096" {
		t.Errorf("Content-Length %q, want 4096", got)
	}
	if got := a.header.Get("Content-Type"); got != "application/octet-stream" {
		t.Errorf("Content-Type %q", got)
	}
	if a := f.do(t, "HEAD", "/backup", "", "Authorization", "Bearer s3cret"); a.status != 200 || a.header.Get("Content-Length") != "4096" || len(a.body) != 0 {
		t.Errorf("HEAD /backup: %d, Content-Length %q, %d body bytes", a.status, a.header.Get("Content-Length"), len(a.body))
	}
	if copied != 0 {
		t.Errorf("HEAD /backup copied %d bytes, want none", copied)
	}
	wantError(t, f.do(t, "PUT", "/backup", "x", "Authorization", "Bearer s3cret"), http.StatusMethodNotAllowed, "not allowed")

	// Failing before the first byte: a JSON error; after it: a body
	// shorter than its Content-Length, which the client notices.
	g := newFixture(t, func(c *Config) {
		c.Backup = func(io.Writer, func(int64)) (int64, error) { return 0, errors.New("node stopped") }
	})
	wantError(t, g.do(t, "GET", "/backup", ""), http.StatusServiceUnavailable, "node stopped")
	h := newFixture(t, func(c *Config) {
		c.Backup = func(w io.Writer, size func(int64)) (int64, error) {
			size(int64(len(data)))
			n, _ := w.Write(data[:100])
			return int64(n), errors.New("disk read failed")
		}
	})
	// (The first bytes may still sit in the server's buffer: then even the
	// status line never arrives.)
	resp, err := http.Get(h.url + "/backup")
	if err == nil {
		defer resp.Body.Close()
		if b, err := io.ReadAll(resp.Body); err == nil {
			t.Fatalf("a backup cut short after %d bytes read without error", len(b))
		}
	}
}

// TestServiceReadsNeedACaughtUpReplica (issue 15, item 4): when the
// replica cannot catch up with the metadata leader, GET /services and
// GET /services/{name} answer 503 with Retry-After, never an empty list or
// a 404.
func TestServiceReadsNeedACaughtUpReplica(t *testing.T) {
	f := newFixture(t, nil)
	f.registry.catchUp = fmt.Errorf("no leader: %w", rpc.ErrUnavailable)
	for _, path := range []string{"/services", "/services/Greeter"} {
		a := f.do(t, "GET", path, "")
		wantError(t, a, http.StatusServiceUnavailable, "cannot bring its copy of the service registry up to date")
		if a.header.Get("Retry-After") == "" {
			t.Errorf("GET %s: 503 without Retry-After", path)
		}
	}
}
