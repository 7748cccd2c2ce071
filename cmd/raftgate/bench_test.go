package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeIngress answers like an ingress: calls with the handler's result,
// sends with 202 and an id, attach with the result. failEvery > 0 makes
// every n-th request a 503.
type fakeIngress struct {
	requests  atomic.Int64
	calls     atomic.Int64
	sends     atomic.Int64
	attaches  atomic.Int64
	failEvery int64
	mu        sync.Mutex
	bodies    map[string]int // payload -> count
	delays    []string
}

func (f *fakeIngress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.requests.Add(1)
	if f.failEvery > 0 && n%f.failEvery == 0 {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"code":503,"message":"no leader","source":"ingress"}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	if f.bodies == nil {
		f.bodies = map[string]int{}
	}
	f.bodies[string(body)]++
	if d := r.URL.Query().Get("delay"); d != "" {
		f.delays = append(f.delays, d)
	}
	f.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/Greeter/greet":
		f.calls.Add(1)
		w.Header().Set("x-restate-id", "inv_call")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `"Hello, bench!"`)
	case r.Method == "POST" && r.URL.Path == "/Greeter/greet/send":
		f.sends.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"invocationId":"inv_%d","status":"Accepted"}`, n)
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/restate/invocation/inv_") && strings.HasSuffix(r.URL.Path, "/attach"):
		f.attaches.Add(1)
		io.WriteString(w, `"Hello, bench!"`)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	}
}

func startFakeIngress(t *testing.T, f *fakeIngress) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

func benchOpts(targets []string, mode string) benchOptions {
	return benchOptions{
		Targets: targets, Mode: mode, Service: "Greeter", Handler: "greet",
		Concurrency: 4, Duration: 300 * time.Millisecond, PayloadBytes: 10, Timeout: 5 * time.Second,
	}
}

func TestBenchClosedLoopTotalsMatchServer(t *testing.T) {
	for _, mode := range []string{modeCall, modeSend, modeSendAttach} {
		t.Run(mode, func(t *testing.T) {
			f := &fakeIngress{}
			o := benchOpts([]string{startFakeIngress(t, f)}, mode)
			o.Warmup = 100 * time.Millisecond
			r, err := runBench(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			served := f.requests.Load()
			perOp := int64(1)
			if mode == modeSendAttach {
				perOp = 2
			}
			if r.Requests == 0 || r.WarmupRequests == 0 || (r.Requests+r.WarmupRequests)*perOp != served {
				t.Fatalf("report %d measured + %d warmup operations (×%d requests), server saw %d", r.Requests, r.WarmupRequests, perOp, served)
			}
			if r.Errors != 0 || r.Successes != r.Requests || len(r.ErrorsByStatus) != 0 {
				t.Fatalf("unexpected errors: %+v", r)
			}
			if mode == modeSendAttach && f.sends.Load() != f.attaches.Load() {
				t.Fatalf("%d sends, %d attaches", f.sends.Load(), f.attaches.Load())
			}
			if r.LatencyMs.P50 <= 0 || r.LatencyMs.P50 > r.LatencyMs.P99 || r.LatencyMs.P99 > r.LatencyMs.Max || r.Throughput <= 0 {
				t.Fatalf("latency/throughput %+v %v", r.LatencyMs, r.Throughput)
			}
			if f.bodies[`"xxxxxxxx"`] == 0 || r.PayloadBytes != 10 {
				t.Fatalf("payload not a 10-byte JSON string: %v", f.bodies)
			}
		})
	}
}

func TestBenchStopsAfterRequests(t *testing.T) {
	f := &fakeIngress{}
	o := benchOpts([]string{startFakeIngress(t, f)}, modeSend)
	o.Duration, o.Requests = time.Minute, 500
	r, err := runBench(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 500 || r.Successes != 500 || f.requests.Load() != 500 {
		t.Fatalf("report %d requests (%d ok), server saw %d; want exactly 500", r.Requests, r.Successes, f.requests.Load())
	}
	o.Requests = -1
	if _, err := runBench(context.Background(), o); err == nil || !strings.Contains(err.Error(), "--requests") {
		t.Fatalf("negative --requests: err = %v", err)
	}
}

func TestBenchErrorsByStatusAndRoundRobin(t *testing.T) {
	a, b := &fakeIngress{failEvery: 3}, &fakeIngress{failEvery: 3}
	r, err := runBench(context.Background(), benchOpts([]string{startFakeIngress(t, a), startFakeIngress(t, b) + "/"}, modeCall))
	if err != nil {
		t.Fatal(err)
	}
	served := a.requests.Load() + b.requests.Load()
	failed := a.requests.Load()/3 + b.requests.Load()/3
	if r.Requests != served || r.Errors != failed || r.ErrorsByStatus["503"] != failed || r.Successes != served-failed {
		t.Fatalf("report requests %d errors %d (%v), servers saw %d with %d failures", r.Requests, r.Errors, r.ErrorsByStatus, served, failed)
	}
	if !strings.Contains(r.ErrorSamples["503"], "no leader") {
		t.Fatalf("samples %v", r.ErrorSamples)
	}
	if diff := a.requests.Load() - b.requests.Load(); diff < -4 || diff > 4 {
		t.Fatalf("round robin uneven: %d vs %d", a.requests.Load(), b.requests.Load())
	}
}

func TestBenchOpenLoopRunsTheSchedule(t *testing.T) {
	f := &fakeIngress{}
	o := benchOpts([]string{startFakeIngress(t, f)}, modeSend)
	o.Rate = 200 // one every 5ms: 100 slots in 500ms
	o.Duration = 500 * time.Millisecond
	o.Delay = 2 * time.Second
	r, err := runBench(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 100 || f.requests.Load() != 100 || r.TargetRate != 200 {
		t.Fatalf("report %d, server %d; want the 100 scheduled operations", r.Requests, f.requests.Load())
	}
	if len(f.delays) == 0 || f.delays[0] != "2s" {
		t.Fatalf("delays %v", f.delays)
	}
}

func TestBenchTransportErrorsAndInterrupt(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	r, err := runBench(context.Background(), benchOpts([]string{url}, modeCall))
	if err != nil {
		t.Fatal(err)
	}
	if r.Successes != 0 || r.ErrorsByStatus["transport"] != r.Requests || r.Requests == 0 {
		t.Fatalf("report %+v", r)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := benchOpts([]string{startFakeIngress(t, &fakeIngress{})}, modeCall)
	o.Duration = time.Hour
	if r, err := runBench(ctx, o); err != nil || !r.Interrupted {
		t.Fatalf("cancelled run: %v %+v", err, r)
	}
}

func TestBenchValidate(t *testing.T) {
	base := benchOpts([]string{"http://127.0.0.1:1"}, modeCall)
	cases := map[string]func(*benchOptions){
		"--ingress":     func(o *benchOptions) { o.Targets = nil },
		"--mode":        func(o *benchOptions) { o.Mode = "poll" },
		"--concurrency": func(o *benchOptions) { o.Concurrency = 0 },
		"--duration":    func(o *benchOptions) { o.Duration = 0 },
		"--rate":        func(o *benchOptions) { o.Rate = -1 },
		"--delay":       func(o *benchOptions) { o.Delay = time.Second },
	}
	for flag, mutate := range cases {
		o := base
		mutate(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: got %v", flag, err)
		}
	}
}

func TestBenchCommandJSONAndProgress(t *testing.T) {
	f := &fakeIngress{}
	url := startFakeIngress(t, f)
	var stdout, stderr bytes.Buffer
	env := cliEnv{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, lookupEnv: func(string) (string, bool) { return "", false }}
	code := run(context.Background(), []string{"bench", "--ingress", url, "--duration", "1200ms", "--warmup", "0s",
		"--concurrency", "2", "--json"}, env, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r BenchReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, stdout.String())
	}
	if r.Requests != f.requests.Load() || r.Mode != modeCall || r.Service != "Greeter/greet" {
		t.Fatalf("report %+v, server saw %d", r, f.requests.Load())
	}
	if !strings.Contains(stderr.String(), "ok ") || !strings.Contains(stderr.String(), "ops/s") {
		t.Fatalf("no progress line on stderr: %q", stderr.String())
	}

	stdout.Reset()
	code = run(context.Background(), []string{"bench", "--ingress", url, "--duration", "100ms", "--warmup", "0s", "--quiet"}, env, nil)
	if code != 0 || !strings.Contains(stdout.String(), "latency ms  p50") || !strings.Contains(stdout.String(), "throughput") {
		t.Fatalf("exit %d, text report %q", code, stdout.String())
	}
}

// TestBenchProgressDuringWarmup: while warming up nothing is measured, so
// the live line says so and counts the warmup's operations, rather than
// "ok 0" beside a rate of hundreds of operations a second.
func TestBenchProgressDuringWarmup(t *testing.T) {
	w := newWorkerStats()
	for range 835 {
		w.record(false, time.Millisecond, "", "")
	}
	line := progressLine(time.Second, 11*time.Second, true, mergeStats([]*workerStats{w}), 835)
	if strings.Contains(line, "ok 0") || !strings.Contains(line, "warming up: 835 operations, not measured") {
		t.Errorf("progress during warmup: %q", line)
	}
	w.record(true, time.Millisecond, "", "")
	line = progressLine(2*time.Second, 11*time.Second, false, mergeStats([]*workerStats{w}), 900)
	if !strings.Contains(line, "ok 1  errors 0  900 ops/s") {
		t.Errorf("progress after warmup: %q", line)
	}
}
