package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/rpc"
	"github.com/raftgate/raftgate/server"
)

func TestDevConfigs(t *testing.T) {
	one := devConfigs(1, "/data", defaultDevAddrs())
	if len(one) != 1 || one[0].IngressAddr != server.DefaultIngressAddr || one[0].AdminAddr != server.DefaultAdminAddr ||
		one[0].DataDir != "/data/node-1" || len(one[0].Join) != 0 || one[0].LogFormat != "console" || !one[0].OpenIngressExpected {
		t.Fatalf("1 node: %+v", one)
	}
	three := devConfigs(3, "/data", defaultDevAddrs())
	n2 := three[1]
	if n2.NodeID != 2 || n2.IngressAddr != "127.0.0.1:8180" || n2.AdminAddr != "127.0.0.1:9170" || n2.NodeAddr != "127.0.0.1:5222" ||
		n2.GossipAddr != "127.0.0.1:8046" || !slices.Equal(n2.Join, []string{"127.0.0.1:7946", "127.0.0.1:8146"}) {
		t.Fatalf("node 2: %+v", n2)
	}
	for _, c := range three {
		if err := c.Validate(); err != nil {
			t.Fatalf("node %d: %v", c.NodeID, err)
		}
		if server.FormatInitialCluster(c.InitialCluster) != "1=127.0.0.1:5122,2=127.0.0.1:5222,3=127.0.0.1:5322" {
			t.Fatalf("initial cluster %v", c.InitialCluster)
		}
	}
}

func TestGreeter(t *testing.T) {
	srv := httptest.NewServer(newGreeter(zerolog.Nop()))
	t.Cleanup(srv.Close)
	for body, want := range map[string]string{
		`"Ada"`:           `"Hello, Ada!"`,
		`{"name":"Alan"}`: `"Hello, Alan!"`,
		"Grace\n":         `"Hello, Grace!"`,
		"":                `"Hello, World!"`,
	} {
		resp, err := http.Post(srv.URL+"/Greeter/greet", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != want || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%q: %d %q", body, resp.StatusCode, got)
		}
	}
	resp, err := http.Get(srv.URL + "/Greeter/greet")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
}

// TestRunDevRegistersTheGreeter runs dev's loop with stand-in nodes and a
// real admin API: the Greeter is registered once /readyz says ready, and
// the registered URL answers.
func TestRunDevRegistersTheGreeter(t *testing.T) {
	reg := &testRegistry{svcs: map[string]*rpc.Service{}}
	adminURL := startAdmin(t, "", reg)
	cfgs := devConfigs(3, t.TempDir(), defaultDevAddrs())
	cfgs[0].AdminAddr = strings.TrimPrefix(adminURL, "http://")

	var running atomic.Int32
	node := func(ctx context.Context, cfg ServerConfig, _ zerolog.Logger) error {
		running.Add(1)
		defer running.Add(-1)
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testutil.LockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- runDev(ctx, out, zerolog.Nop(), cfgs, devHelp{cli: "raftgate", tempDir: true}, node) }()

	testutil.WaitFor(t, 10*time.Second, "the dev help text", func() bool { return strings.Contains(out.String(), "Ctrl-C stops the cluster") })
	if running.Load() != 3 {
		t.Fatalf("%d nodes running, want 3", running.Load())
	}
	svc, ok := reg.Lookup(greeterName)
	if !ok || !slices.Equal(svc.Handlers, []string{"greet"}) {
		t.Fatalf("registered %v", svc)
	}
	resp, err := http.Post(svc.Url+"/Greeter/greet", "application/json", strings.NewReader(`"Ada"`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != `"Hello, Ada!"` {
		t.Fatalf("greeter at registered URL answered %q", body)
	}
	for _, want := range []string{"curl -s http://127.0.0.1:8080/Greeter/greet", "idempotency-key: order-42", "http://127.0.0.1:8180 http://127.0.0.1:8280"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runDev: %v", err)
	}
	if running.Load() != 0 {
		t.Fatal("runDev returned before its nodes stopped")
	}
}

func TestRunDevFailsWhenANodeFails(t *testing.T) {
	cfgs := devConfigs(1, t.TempDir(), defaultDevAddrs())
	cfgs[0].AdminAddr = "127.0.0.1:1" // never ready
	err := runDev(context.Background(), io.Discard, zerolog.Nop(), cfgs, devHelp{cli: "raftgate", tempDir: true},
		func(context.Context, ServerConfig, zerolog.Logger) error { return errors.New("boom") })
	if err == nil || err.Error() != "node 1: boom" {
		t.Fatalf("got %v", err)
	}
}

func TestRegisterWhenReadyWaitsForReadiness(t *testing.T) {
	var readyCalls, puts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/readyz" && readyCalls.Add(1) < 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.URL.Path == "/readyz":
		case r.Method == "PUT" && r.URL.Path == "/services/Greeter" && puts.Add(1) == 1:
			w.WriteHeader(http.StatusServiceUnavailable) // metadata leader moving: retried
		case r.Method == "PUT":
			w.WriteHeader(http.StatusCreated)
		}
	}))
	t.Cleanup(srv.Close)
	c := &adminClient{base: srv.URL, http: srv.Client()}
	if err := registerWhenReady(context.Background(), c, "http://127.0.0.1:9", 10*time.Second, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if readyCalls.Load() < 3 || puts.Load() != 2 {
		t.Fatalf("%d readiness polls, %d puts", readyCalls.Load(), puts.Load())
	}

	err := registerWhenReady(context.Background(), &adminClient{base: "http://127.0.0.1:1", http: srv.Client()}, "http://x", 50*time.Millisecond, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "cluster not ready after 50ms") {
		t.Fatalf("unreachable admin: %v", err)
	}
}

// TestEchoCommand runs `raftgate echo` and calls it as raftgate would.
func TestEchoCommand(t *testing.T) {
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &testutil.LockedBuffer{}, &testutil.LockedBuffer{}
	env := cliEnv{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr, lookupEnv: func(string) (string, bool) { return "", false }}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"echo", "--addr", addr}, env, nil) }()
	testutil.WaitFor(t, 10*time.Second, "echo to listen", func() bool { return strings.Contains(stdout.String(), "Echo service at http://"+addr) })

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/Echo/anything", strings.NewReader(`{"a":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-restate-id", "inv_1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != `{"a":1}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("echo answered %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if !strings.Contains(stderr.String(), "Echo/anything: invocation inv_1") {
		t.Errorf("call not noted: %q", stderr.String())
	}
	resp, err = http.Post("http://"+addr+"/Other/x", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("another service's path: %d, want 404", resp.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("echo exited %d: %s", code, stderr.String())
	}
}
