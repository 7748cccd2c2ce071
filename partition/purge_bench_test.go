package partition

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/results"
	"github.com/raftgate/raftgate/rpc"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
)

// BenchmarkPurgeBacklog measures what purging a backlog of expired
// results costs the other partitions of a node: partition 1 holds
// PURGE_BENCH_RESULTS (default 1,000,000) results completed two days ago;
// its sweeper purges them (Retention one day) while 16 submitters append
// to partition 2 on the same node, whose entries share raftlog's applier
// and fsync with partition 1's. It reports partition 2's append latency
// (p50, p99, max) before and during the purge, and how long the purge
// took. limit=100 is PurgeLimit's default; limit=all purges the backlog
// in one Purge, as before Purge had a limit. One node (real WAL and bbolt
// with fdatasync, no network): the applier, not replication, is what a
// purge holds up. Run it alone: -run '^$' -bench PurgeBacklog -benchtime 1x.
func BenchmarkPurgeBacklog(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("PURGE_BENCH_RESULTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	for _, limit := range []int{100, n} {
		name := "limit=" + strconv.Itoa(limit)
		if limit == n {
			name = "limit=all"
		}
		b.Run(name, func(b *testing.B) { benchPurgeBacklog(b, n, limit) })
	}
}

func benchPurgeBacklog(b *testing.B, backlog, limit int) {
	svc := newRecordingService(b)
	svc.block = make(chan struct{}) // deliveries park: only Invokes in partition 2's log
	defer close(svc.block)
	services := svc.lookup("greeter")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	logger := zerolog.New(zerolog.NewTestWriter(b)).Level(zerolog.WarnLevel)
	node, err := raftlog.Open(raftlog.Config{NodeID: 1, DataDir: b.TempDir(), Peers: map[uint64]string{1: l.Addr().String()},
		TickInterval: 20 * time.Millisecond, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	node.RegisterGRPC(srv)
	go func() { _ = srv.Serve(l) }()
	defer func() {
		srv.Stop()
		_ = node.Close()
	}()
	procs := map[raftlog.GroupID]*Processor{}
	groups := map[raftlog.GroupID]*raftlog.Group{}
	for _, g := range []raftlog.GroupID{1, 2} {
		cfg := DefaultConfig()
		cfg.Partition = uint32(g)
		cfg.Services = services
		cfg.Logger = logger
		cfg.Invoker.Concurrency = 1
		cfg.SweepInterval = time.Hour // the purge is started below
		cfg.PurgeLimit = limit
		p, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		group, err := node.AddGroup(g, []uint64{1}, p)
		if err != nil {
			b.Fatal(err)
		}
		p.Start(group)
		procs[g], groups[g] = p, group
	}
	node.Watch(func(ev raftlog.LeaderEvent) {
		if p := procs[ev.Group]; p != nil {
			p.OnLeadership(ev)
		}
	})
	for g, p := range procs {
		testutil.WaitFor(b, 20*time.Second, fmt.Sprintf("partition %d leads", g), func() bool {
			leading, _, _ := p.tracker.Leadership()
			return leading
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The backlog: Invoke and Complete of each invocation in one entry,
	// two days old, proposed straight to partition 1's log.
	start := time.Now()
	old := time.Now().Add(-48 * time.Hour).UnixMilli()
	const perEntry = 500
	for done := 0; done < backlog; done += perEntry {
		cmds := make([]*rpc.Command, 0, 2*perEntry)
		for i := range min(perEntry, backlog-done) {
			inv := newInvoke("greeter", done+i)
			inv.ProposedAtUnixMs = old
			cmds = append(cmds, invokeCmd(inv), completeCmd(&rpc.Complete{InvocationId: inv.InvocationId,
				Result: &rpc.Result{Status: 200, Body: []byte("ok")}, ProposedAtUnixMs: old}))
		}
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := groups[1].Propose(ctx, data); err != nil {
			b.Fatal(err)
		}
		if (done/perEntry)%20 == 19 {
			if err := groups[1].ReadIndex(ctx); err != nil { // keep the unapplied tail short
				b.Fatal(err)
			}
		}
	}
	if err := groups[1].ReadIndex(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d expired results stored in %v", backlog, time.Since(start).Round(time.Millisecond))

	// Partition 2's appends: a baseline, then during the purge.
	measure := func(until func() bool) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := 0; !until(); i++ {
					inv := newInvoke("greeter", i)
					inv.InvocationId = invocation.Random().Bytes()
					t0 := time.Now()
					if _, err := procs[2].Append(ctx, inv); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(t0)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return lat
	}
	baseEnd := time.Now().Add(5 * time.Second)
	base := measure(func() bool { return time.Now().After(baseEnd) })

	purged := func() bool {
		var found bool
		_ = groups[1].View(context.Background(), func(bk *bolt.Bucket) error { _, found = results.Oldest(bk); return nil })
		return !found
	}
	var done atomic.Bool
	b.ResetTimer()
	start = time.Now()
	procs[1].sweepCh <- struct{}{}
	go func() {
		for !purged() && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond) // polling a condition, no synchronisation
		}
		done.Store(true)
	}()
	during := measure(done.Load)
	took := time.Since(start)
	b.StopTimer()
	if !purged() {
		b.Fatal("backlog not purged")
	}
	report := func(what string, lat []time.Duration) {
		if len(lat) == 0 {
			b.Fatalf("%s: no appends measured", what)
		}
		slices.Sort(lat)
		q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Microseconds()) / 1000 }
		b.ReportMetric(q(0.5), what+"-p50-ms")
		b.ReportMetric(q(0.99), what+"-p99-ms")
		b.ReportMetric(q(1), what+"-max-ms")
		b.Logf("%s: %d appends, p50 %.2f ms, p99 %.2f ms, max %.2f ms", what, len(lat), q(0.5), q(0.99), q(1))
	}
	report("base", base)
	report("purge", during)
	b.ReportMetric(took.Seconds(), "purge-s")
}
