package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds, in microseconds: 1 µs to 5 minutes at 3 significant
// digits. Slower answers are recorded as the maximum.
const (
	histMinMicros = 1
	histMaxMicros = int64(5 * time.Minute / time.Microsecond)
	histSigFigs   = 3
)

// workerStats is one client's tally. The client records, the progress
// display reads; mu is uncontended except once a second.
type workerStats struct {
	mu        sync.Mutex
	latency   *hdrhistogram.Histogram // successes only, µs
	ok        int64
	failed    int64
	warmup    int64 // operations finished during warmup, not in the above
	errors    map[string]int64
	errSample map[string]string
}

func newWorkerStats() *workerStats {
	return &workerStats{
		latency:   hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs),
		errors:    map[string]int64{},
		errSample: map[string]string{},
	}
}

// record tallies one finished operation. errClass is "" for success, else
// the status code or "transport"/"timeout"/"bad-response"; sample explains.
func (w *workerStats) record(measured bool, latency time.Duration, errClass, sample string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !measured:
		w.warmup++
	case errClass == "":
		w.ok++
		us := min(max(latency.Microseconds(), histMinMicros), histMaxMicros)
		_ = w.latency.RecordValue(us) // in range by construction
	default:
		w.failed++
		w.errors[errClass]++
		if _, ok := w.errSample[errClass]; !ok && sample != "" {
			w.errSample[errClass] = sample
		}
	}
}

// tally is a merged view of all workers.
type tally struct {
	latency     *hdrhistogram.Histogram
	ok, failed  int64
	warmup      int64
	errors      map[string]int64
	errorSample map[string]string
}

func mergeStats(ws []*workerStats) tally {
	t := tally{
		latency:     hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs),
		errors:      map[string]int64{},
		errorSample: map[string]string{},
	}
	for _, w := range ws {
		w.mu.Lock()
		t.latency.Merge(w.latency)
		t.ok += w.ok
		t.failed += w.failed
		t.warmup += w.warmup
		for k, v := range w.errors {
			t.errors[k] += v
		}
		for k, v := range w.errSample {
			if _, ok := t.errorSample[k]; !ok {
				t.errorSample[k] = v
			}
		}
		w.mu.Unlock()
	}
	return t
}

// LatencySummary is in milliseconds, over successful operations.
type LatencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// BenchReport is the result of a bench run (--json prints it as is).
type BenchReport struct {
	Mode        string   `json:"mode"`
	Targets     []string `json:"targets"`
	Service     string   `json:"service"`
	Concurrency int      `json:"concurrency"`
	// TargetRate is the open-loop rate in operations/s; 0 for closed loop.
	TargetRate   float64 `json:"targetRate"`
	PayloadBytes int     `json:"payloadBytes"`
	// WarmupSeconds were run but not measured.
	WarmupSeconds float64 `json:"warmupSeconds"`
	// DurationSeconds is the measured wall time, until the last operation
	// started in the window finished.
	DurationSeconds float64 `json:"durationSeconds"`
	// Requests counts measured operations (an operation of send+attach is
	// two HTTP requests); Successes + Errors = Requests.
	Requests       int64 `json:"requests"`
	Successes      int64 `json:"successes"`
	Errors         int64 `json:"errors"`
	WarmupRequests int64 `json:"warmupRequests"`
	// Throughput is successful operations per second.
	Throughput float64        `json:"throughput"`
	LatencyMs  LatencySummary `json:"latencyMs"`
	// ErrorsByStatus counts failed operations by HTTP status, or by
	// "transport", "timeout", "bad-response".
	ErrorsByStatus map[string]int64  `json:"errorsByStatus"`
	ErrorSamples   map[string]string `json:"errorSamples,omitempty"`
	// Interrupted is set when the run was stopped before its end.
	Interrupted bool `json:"interrupted"`
}

func micros2ms(us int64) float64 { return float64(us) / 1000 }

func latencySummary(h *hdrhistogram.Histogram) LatencySummary {
	if h.TotalCount() == 0 {
		return LatencySummary{}
	}
	return LatencySummary{
		P50:  micros2ms(h.ValueAtPercentile(50)),
		P90:  micros2ms(h.ValueAtPercentile(90)),
		P99:  micros2ms(h.ValueAtPercentile(99)),
		P999: micros2ms(h.ValueAtPercentile(99.9)),
		Max:  micros2ms(h.Max()),
		Mean: h.Mean() / 1000,
	}
}

// printReport writes the human-readable report.
func printReport(w io.Writer, r *BenchReport) {
	loop := "closed loop"
	if r.TargetRate > 0 {
		loop = fmt.Sprintf("open loop at %.0f/s", r.TargetRate)
	}
	fmt.Fprintf(w, "bench %s %s: %d clients, %s, %d-byte payload, %d target(s)\n",
		r.Mode, r.Service, r.Concurrency, loop, r.PayloadBytes, len(r.Targets))
	if r.Interrupted {
		fmt.Fprintf(w, "INTERRUPTED: partial results\n")
	}
	fmt.Fprintf(w, "duration    %.1fs measured (+%.1fs warmup, %d operations)\n", r.DurationSeconds, r.WarmupSeconds, r.WarmupRequests)
	fmt.Fprintf(w, "operations  %d (ok %d, errors %d)\n", r.Requests, r.Successes, r.Errors)
	fmt.Fprintf(w, "throughput  %.1f ok/s\n", r.Throughput)
	l := r.LatencyMs
	fmt.Fprintf(w, "latency ms  p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  mean %.2f\n", l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
	if len(r.ErrorsByStatus) > 0 {
		fmt.Fprintf(w, "errors     ")
		for _, k := range slices.Sorted(maps.Keys(r.ErrorsByStatus)) {
			fmt.Fprintf(w, " %s: %d", k, r.ErrorsByStatus[k])
		}
		fmt.Fprintln(w)
		for _, k := range slices.Sorted(maps.Keys(r.ErrorSamples)) {
			fmt.Fprintf(w, "  e.g. %s: %s\n", k, oneLine(r.ErrorSamples[k], 200))
		}
	}
}

// progressLine is the one-line live display. During the warmup nothing is
// counted yet, so it shows the operations done so far instead of ok and
// errors, which would read 0 beside a non-zero rate.
func progressLine(elapsed, total time.Duration, warmingUp bool, t tally, rate float64) string {
	if warmingUp {
		return fmt.Sprintf("[%4.0fs/%.0fs] warming up: %d operations, not measured  %.0f ops/s",
			elapsed.Seconds(), total.Seconds(), t.warmup, rate)
	}
	p99 := "-"
	if t.latency.TotalCount() > 0 {
		p99 = fmt.Sprintf("%.2fms", micros2ms(t.latency.ValueAtPercentile(99)))
	}
	return fmt.Sprintf("[%4.0fs/%.0fs] ok %d  errors %d  %.0f ops/s  p99 %s",
		elapsed.Seconds(), total.Seconds(), t.ok, t.failed, rate, p99)
}

func oneLine(s string, limit int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > limit {
		s = s[:limit] + "…"
	}
	return s
}
