package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Bench modes.
const (
	modeCall       = "call"        // POST /{service}/{handler}, wait for the result
	modeSend       = "send"        // POST …/send, acknowledged when durable
	modeSendAttach = "send+attach" // send, then GET …/attach for the result
)

// benchOptions configures a load run against one or more ingresses.
type benchOptions struct {
	// Targets are ingress base URLs; operations go round-robin.
	Targets []string
	Mode    string
	// Service and Handler to invoke.
	Service, Handler string
	// Concurrency is the number of clients (closed loop) or the cap on
	// operations in flight (open loop).
	Concurrency int
	// Rate > 0 runs open loop at that many operations/s, with latency
	// measured from each operation's intended start (no coordinated
	// omission); 0 runs closed loop.
	Rate float64
	// Warmup runs before Duration and is not measured.
	Warmup, Duration time.Duration
	// Requests > 0 ends the run once that many measured operations were
	// issued, if Duration has not ended it first.
	Requests int
	// PayloadBytes is the size of the JSON string body.
	PayloadBytes int
	// Delay is passed as ?delay= on sends.
	Delay time.Duration
	// Timeout bounds one HTTP request.
	Timeout time.Duration
	// Progress receives the live one-line display every ProgressEvery;
	// nil disables it. ProgressTTY overwrites the line in place.
	Progress      io.Writer
	ProgressEvery time.Duration
	ProgressTTY   bool
}

func (o benchOptions) validate() error {
	switch {
	case len(o.Targets) == 0:
		return errors.New("--ingress: at least one URL")
	case o.Mode != modeCall && o.Mode != modeSend && o.Mode != modeSendAttach:
		return fmt.Errorf("--mode: %q: want send, call or send+attach", o.Mode)
	case o.Service == "" || o.Handler == "":
		return errors.New("--service: want SERVICE/HANDLER")
	case o.Concurrency < 1:
		return errors.New("--concurrency: must be at least 1")
	case o.Duration <= 0:
		return errors.New("--duration: must be positive")
	case o.Requests < 0:
		return errors.New("--requests: must not be negative")
	case o.Warmup < 0:
		return errors.New("--warmup: must not be negative")
	case o.Rate < 0:
		return errors.New("--rate: must not be negative")
	case o.PayloadBytes < 0:
		return errors.New("--payload-bytes: must not be negative")
	case o.Delay < 0:
		return errors.New("--delay: must not be negative")
	case o.Delay > 0 && o.Mode == modeCall:
		return errors.New("--delay: only with --mode send or send+attach (a call cannot be delayed)")
	case o.Timeout <= 0:
		return errors.New("--timeout: must be positive")
	}
	return nil
}

// benchPayload is a JSON string of exactly n bytes (at least 2: `""`).
func benchPayload(n int) []byte {
	n = max(n, 2)
	b := bytes.Repeat([]byte("x"), n)
	b[0], b[n-1] = '"', '"'
	return b
}

// newBenchTransport is the one transport all clients share, with enough
// idle connections per host that every client keeps its connection.
func newBenchTransport(o benchOptions) *http.Transport {
	return &http.Transport{
		Proxy:               nil, // the targets are addressed directly
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        o.Concurrency*len(o.Targets) + 16,
		MaxIdleConnsPerHost: o.Concurrency + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// bench is one run's state.
type bench struct {
	opt     benchOptions
	client  *http.Client
	payload []byte
	baseURL []string // per target
	sendURL []string
	callURL []string
	next    atomic.Uint64 // round-robin target / open-loop sequence
	issued  atomic.Int64  // measured operations started (for Requests)
}

// runBench runs the load and returns the report. Operations in flight at
// the end of the window finish and are counted; cancelling ctx stops early
// (the report says Interrupted).
func runBench(ctx context.Context, o benchOptions) (*BenchReport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	transport := newBenchTransport(o)
	defer transport.CloseIdleConnections()
	b := &bench{opt: o, client: &http.Client{Transport: transport, Timeout: o.Timeout}, payload: benchPayload(o.PayloadBytes)}
	path := "/" + url.PathEscape(o.Service) + "/" + url.PathEscape(o.Handler)
	send := path + "/send"
	if o.Delay > 0 {
		send += "?delay=" + url.QueryEscape(o.Delay.String())
	}
	for _, t := range o.Targets {
		t = normalizeBaseURL(t)
		b.baseURL = append(b.baseURL, t)
		b.callURL = append(b.callURL, t+path)
		b.sendURL = append(b.sendURL, t+send)
	}

	start := time.Now()
	measureFrom := start.Add(o.Warmup)
	end := measureFrom.Add(o.Duration)
	stats := make([]*workerStats, o.Concurrency)
	var workers sync.WaitGroup
	for i := range stats {
		stats[i] = newWorkerStats()
		workers.Go(func() { b.worker(ctx, stats[i], start, measureFrom, end) })
	}

	done := make(chan struct{})
	var progress sync.WaitGroup
	if o.Progress != nil {
		progress.Go(func() { b.showProgress(done, stats, start, measureFrom, end) })
	}
	workers.Wait()
	finished := time.Now()
	close(done)
	progress.Wait()

	t := mergeStats(stats)
	measured := finished.Sub(measureFrom)
	if measured <= 0 {
		measured = time.Nanosecond
	}
	r := &BenchReport{
		Mode: o.Mode, Targets: append([]string(nil), o.Targets...), Service: o.Service + "/" + o.Handler,
		Concurrency: o.Concurrency, TargetRate: o.Rate, PayloadBytes: len(b.payload),
		WarmupSeconds: o.Warmup.Seconds(), DurationSeconds: measured.Seconds(),
		Requests: t.ok + t.failed, Successes: t.ok, Errors: t.failed, WarmupRequests: t.warmup,
		Throughput: float64(t.ok) / measured.Seconds(), LatencyMs: latencySummary(t.latency),
		ErrorsByStatus: t.errors, ErrorSamples: t.errorSample,
		Interrupted: ctx.Err() != nil,
	}
	return r, nil
}

// worker runs operations until the window ends. Closed loop: back to back.
// Open loop: each takes the next slot of the global schedule, waits for its
// time, and measures latency from that intended time.
func (b *bench) worker(ctx context.Context, st *workerStats, start, measureFrom, end time.Time) {
	var interval time.Duration
	if b.opt.Rate > 0 {
		interval = time.Duration(float64(time.Second) / b.opt.Rate)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		intended := time.Now()
		seq := b.next.Add(1) - 1
		if interval > 0 {
			intended = start.Add(time.Duration(seq) * interval)
			if wait := time.Until(intended); wait > 0 && intended.Before(end) {
				timer.Reset(wait)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			}
		}
		if !intended.Before(end) {
			return
		}
		if b.opt.Requests > 0 && !intended.Before(measureFrom) && b.issued.Add(1) > int64(b.opt.Requests) {
			return
		}
		errClass, sample := b.operation(ctx, int(seq%uint64(len(b.callURL))))
		if ctx.Err() != nil {
			return // interrupted: the operation's outcome says nothing about the cluster
		}
		st.record(!intended.Before(measureFrom), time.Since(intended), errClass, sample)
	}
}

// operation runs one operation against target i; errClass is "" on success.
func (b *bench) operation(ctx context.Context, i int) (errClass, sample string) {
	switch b.opt.Mode {
	case modeCall:
		_, errClass, sample = b.post(ctx, b.callURL[i])
		return errClass, sample
	case modeSend:
		_, errClass, sample = b.post(ctx, b.sendURL[i])
		return errClass, sample
	default: // send+attach
		body, errClass, sample := b.post(ctx, b.sendURL[i])
		if errClass != "" {
			return errClass, sample
		}
		var acc struct {
			InvocationID string `json:"invocationId"`
		}
		if err := json.Unmarshal(body, &acc); err != nil || acc.InvocationID == "" {
			return "bad-response", fmt.Sprintf("send answered %q", oneLine(string(body), 200))
		}
		_, errClass, sample = b.do(ctx, http.MethodGet, b.baseURL[i]+"/restate/invocation/"+url.PathEscape(acc.InvocationID)+"/attach", nil)
		return errClass, sample
	}
}

func (b *bench) post(ctx context.Context, u string) ([]byte, string, string) {
	return b.do(ctx, http.MethodPost, u, b.payload)
}

// do sends one request and reads the whole answer (so that the connection
// is reused). Any 2xx is a success.
func (b *bench) do(ctx context.Context, method, u string, body []byte) ([]byte, string, string) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, "transport", err.Error()
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return nil, "timeout", err.Error()
		}
		return nil, "transport", err.Error()
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, "transport", err.Error()
	}
	if resp.StatusCode/100 != 2 {
		return data, strconv.Itoa(resp.StatusCode), oneLine(string(data), 200)
	}
	return data, "", ""
}

// showProgress writes the live line every ProgressEvery until done.
func (b *bench) showProgress(done <-chan struct{}, stats []*workerStats, start, measureFrom, end time.Time) {
	every := b.opt.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var lastOps int64
	last := time.Now()
	for {
		select {
		case <-done:
			if b.opt.ProgressTTY {
				fmt.Fprint(b.opt.Progress, "\r\033[K")
			}
			return
		case now := <-tick.C:
			t := mergeStats(stats)
			ops := t.ok + t.failed + t.warmup
			rate := float64(ops-lastOps) / now.Sub(last).Seconds()
			lastOps, last = ops, now
			line := progressLine(now.Sub(start), end.Sub(start), now.Before(measureFrom), t, rate)
			if b.opt.ProgressTTY {
				fmt.Fprintf(b.opt.Progress, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(b.opt.Progress, line)
			}
		}
	}
}
