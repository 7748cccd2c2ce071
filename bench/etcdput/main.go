package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type options struct {
	endpoints    []string
	concurrency  int
	conns        int
	duration     time.Duration
	warmup       time.Duration
	payloadBytes int
	keySpace     int
	timeout      time.Duration
}

func main() {
	var o options
	var endpoints string
	flag.StringVar(&endpoints, "endpoints", "127.0.0.1:2379", "etcd client endpoints, comma-separated")
	flag.IntVar(&o.concurrency, "concurrency", 64, "clients, each with one put in flight")
	flag.IntVar(&o.conns, "conns", 8, "gRPC connections the clients share (round-robin)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured duration")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before --duration")
	flag.IntVar(&o.payloadBytes, "payload-bytes", 16, "value size")
	flag.IntVar(&o.keySpace, "keys", 100000, "distinct keys written (bounds the key space, not the revisions)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "timeout of one put")
	flag.Parse()
	o.endpoints = strings.Split(endpoints, ",")
	rep, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdput:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
}

// latencySummary and report mirror the fields of raftgate's bench report.
type latencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

type report struct {
	Mode            string           `json:"mode"`
	Targets         []string         `json:"targets"`
	Concurrency     int              `json:"concurrency"`
	PayloadBytes    int              `json:"payloadBytes"`
	DurationSeconds float64          `json:"durationSeconds"`
	Requests        int64            `json:"requests"`
	Successes       int64            `json:"successes"`
	Errors          int64            `json:"errors"`
	WarmupRequests  int64            `json:"warmupRequests"`
	Throughput      float64          `json:"throughput"`
	LatencyMs       latencySummary   `json:"latencyMs"`
	ErrorsByStatus  map[string]int64 `json:"errorsByStatus"`
}

var errNoConns = errors.New("--conns and --concurrency must be positive")

func run(o options) (report, error) {
	if o.conns < 1 || o.concurrency < 1 {
		return report{}, errNoConns
	}
	clients := make([]*clientv3.Client, o.conns)
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   o.endpoints,
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return report{}, fmt.Errorf("connect %v: %w", o.endpoints, err)
		}
		defer c.Close()
		clients[i] = c
	}
	value := strings.Repeat("x", o.payloadBytes)

	var measuring, measured atomic.Bool // measured: the measured window is over
	var requests, errs, warmups atomic.Int64
	var mu sync.Mutex
	hist := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	errorsByKind := map[string]int64{}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := clients[w%len(clients)]
			local := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
			defer func() { mu.Lock(); hist.Merge(local); mu.Unlock() }()
			for seq := 0; ctx.Err() == nil; seq++ {
				key := fmt.Sprintf("bench/%d", (w*1_000_003+seq)%o.keySpace)
				pctx, pcancel := context.WithTimeout(ctx, o.timeout)
				start := time.Now()
				_, err := cli.Put(pctx, key, value)
				elapsed := time.Since(start)
				pcancel()
				if !measuring.Load() || ctx.Err() != nil {
					if err == nil && !measured.Load() {
						warmups.Add(1)
					}
					continue
				}
				requests.Add(1)
				if err != nil {
					errs.Add(1)
					mu.Lock()
					errorsByKind[fmt.Sprintf("%T", err)]++
					mu.Unlock()
					continue
				}
				_ = local.RecordValue(elapsed.Microseconds())
			}
		}()
	}
	time.Sleep(o.warmup) // the warm-up is a duration of load, not a synchronisation
	measuring.Store(true)
	began := time.Now()
	time.Sleep(o.duration)
	measured.Store(true)
	measuring.Store(false)
	elapsed := time.Since(began)
	cancel()
	wg.Wait()

	ms := func(us int64) float64 { return float64(us) / 1000 }
	succ := requests.Load() - errs.Load()
	return report{
		Mode:            "put",
		Targets:         o.endpoints,
		Concurrency:     o.concurrency,
		PayloadBytes:    o.payloadBytes,
		DurationSeconds: elapsed.Seconds(),
		Requests:        requests.Load(),
		Successes:       succ,
		Errors:          errs.Load(),
		WarmupRequests:  warmups.Load(),
		Throughput:      float64(succ) / elapsed.Seconds(),
		LatencyMs: latencySummary{
			P50: ms(hist.ValueAtQuantile(50)), P90: ms(hist.ValueAtQuantile(90)),
			P99: ms(hist.ValueAtQuantile(99)), P999: ms(hist.ValueAtQuantile(99.9)),
			Max: ms(hist.Max()), Mean: hist.Mean() / 1000,
		},
		ErrorsByStatus: errorsByKind,
	}, nil
}
