package raftlog

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// benchSM stores every entry under its index and wakes proposers waiting
// for their index once the batch is durable.
type benchSM struct {
	mu      sync.Mutex
	applied uint64
	waiters []benchWaiter
}

type benchWaiter struct {
	index uint64
	ch    chan struct{}
}

// Apply answers proposers from Acknowledge, as the partition processor
// does: before the apply transaction's own commit. Its keys arrive in
// order, so it fills pages as the partition's time-ordered buckets do.
func (s *benchSM) Apply(b *bolt.Bucket, ents []Entry) (Applied, error) {
	b.FillPercent = 0.9
	var key [8]byte
	for _, e := range ents {
		binary.BigEndian.PutUint64(key[:], e.Index)
		if err := b.Put(key[:], e.Data); err != nil {
			return Applied{}, err
		}
	}
	last := ents[len(ents)-1].Index
	return Applied{Acknowledge: func() {
		s.mu.Lock()
		s.applied = last
		keep := s.waiters[:0]
		for _, w := range s.waiters {
			if w.index <= last {
				close(w.ch)
			} else {
				keep = append(keep, w)
			}
		}
		s.waiters = keep
		s.mu.Unlock()
	}}, nil
}

func (s *benchSM) Restore(*bolt.Bucket) error { return nil }

// wait returns a channel closed once index is applied.
func (s *benchSM) wait(index uint64, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied >= index {
		close(ch)
		return
	}
	s.waiters = append(s.waiters, benchWaiter{index, ch})
}

// BenchmarkPropose: three nodes in one process over loopback gRPC with
// fsync'd bbolt, 4 partition groups (leaders spread over the nodes) plus the
// meta group; N concurrent proposers of 256-byte entries, each waiting until
// its entry is applied on the leader (the commit latency reported). Run:
//
//	go test -run '^$' -bench Propose -benchtime=5s ./raftlog/
func BenchmarkPropose(b *testing.B) {
	for _, proposers := range []int{1, 64, 256, 512} {
		b.Run(fmt.Sprintf("proposers=%d", proposers), func(b *testing.B) {
			benchPropose(b, proposers, 4)
		})
	}
}

func benchPropose(b *testing.B, proposers, partitions int) {
	c := &grpcCluster{}
	sms := map[uint64]map[GroupID]*benchSM{}
	groups := []GroupID{MetaGroup}
	for p := 1; p <= partitions; p++ {
		groups = append(groups, GroupID(p))
	}
	*c = *newGRPCClusterWith(b, 3, groups, nil, func(id uint64, gid GroupID) StateMachine {
		if sms[id] == nil {
			sms[id] = map[GroupID]*benchSM{}
		}
		sm := &benchSM{}
		sms[id][gid] = sm
		return sm
	})
	// Spread partition leaders over the nodes, as a real cluster would.
	for p := 1; p <= partitions; p++ {
		gid := GroupID(p)
		want := c.ids[(p-1)%len(c.ids)]
		lead := c.leader(b, gid, 10*time.Second)
		if lead != want {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := c.nodes[lead].Group(gid).TransferLeadership(ctx, want); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	}
	c.leader(b, MetaGroup, 10*time.Second) // its election must not land in the run
	leaders := make([]*Group, partitions)
	leaderSM := make([]*benchSM, partitions)
	for p := 1; p <= partitions; p++ {
		lead := c.leader(b, GroupID(p), 10*time.Second)
		leaders[p-1] = c.nodes[lead].Group(GroupID(p))
		leaderSM[p-1] = sms[lead][GroupID(p)]
	}

	payload := make([]byte, 256)
	var next atomic.Int64
	lat := make([][]time.Duration, proposers)
	var heapMax atomic.Uint64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-t.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > heapMax.Load() {
					heapMax.Store(ms.HeapInuse)
				}
			case <-stopSampling:
				return
			}
		}
	}()
	changes0 := 0.0
	for _, id := range c.ids {
		changes0 += testCounter(c.nodes[id].metrics.leaderChanges)
	}
	b.ResetTimer()
	sched0 := schedLatencies()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	var failures atomic.Int64
	for w := range proposers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			part := w % partitions
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				p, err := leaders[part].Propose(ctx, payload)
				if err != nil {
					failures.Add(1)
					continue
				}
				ch := make(chan struct{})
				leaderSM[part].wait(p.Index, ch)
				<-ch
				lat[w] = append(lat[w], time.Since(t0))
				part = (part + 1) % partitions
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuUsed := processCPU() - cpu0
	b.StopTimer()
	close(stopSampling)
	sampler.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		b.Fatalf("no proposal succeeded (%d failures)", failures.Load())
	}
	pct := func(q float64) float64 {
		return float64(all[min(len(all)-1, int(q*float64(len(all))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "entries/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.Logf("latency ms: p80 %.1f p90 %.1f p95 %.1f p98 %.1f p99 %.1f p99.9 %.1f max %.1f", pct(0.8), pct(0.9), pct(0.95), pct(0.98), pct(0.99), pct(0.999), pct(1))
	b.ReportMetric(float64(heapMax.Load())/(1<<20), "heap-MB")
	b.ReportMetric(float64(cpuUsed.Microseconds())/float64(len(all)), "cpu-us/entry")
	b.ReportMetric(schedLatencies().since(sched0).quantile(0.99)*1000, "sched-p99-ms")
	for _, id := range c.ids {
		m := c.nodes[id].metrics
		syncs, syncSum := testHistogram(m.walSyncSeconds)
		_, ents := testHistogram(m.walBatchEntries)
		writes, reqs := testHistogram(m.walBatchRequests)
		cps, cpSum := testHistogram(m.checkpointSeconds)
		b.Logf("node %d: %d log writes (%.1f entries, %.1f requests each), %d fdatasyncs avg %.2f ms, %d checkpoints avg %.2f ms",
			id, writes, ents/float64(max(writes, 1)), reqs/float64(max(writes, 1)),
			syncs, 1000*syncSum/float64(max(syncs, 1)), cps, 1000*cpSum/float64(max(cps, 1)))
	}
	changes := -changes0
	for _, id := range c.ids {
		changes += testCounter(c.nodes[id].metrics.leaderChanges)
	}
	if changes > 0 {
		b.Logf("%v leadership changes seen during the run", changes)
	}
	if f := failures.Load(); f > 0 {
		b.Logf("%d proposals failed", f)
	}
}

// schedHistogram is the runtime's histogram of how long goroutines waited
// runnable before they ran.
type schedHistogram struct {
	counts  []uint64
	buckets []float64
}

func schedLatencies() schedHistogram {
	s := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	rtmetrics.Read(s)
	h := s[0].Value.Float64Histogram()
	return schedHistogram{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// since is the histogram of the waits after base was read.
func (h schedHistogram) since(base schedHistogram) schedHistogram {
	d := schedHistogram{counts: slices.Clone(h.counts), buckets: h.buckets}
	for i := range base.counts {
		d.counts[i] -= base.counts[i]
	}
	return d
}

// quantile is the upper bound of the bucket holding quantile q, in seconds.
func (h schedHistogram) quantile(q float64) float64 {
	var total uint64
	for _, c := range h.counts {
		total += c
	}
	want := uint64(q * float64(total))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > want {
			return h.buckets[i+1]
		}
	}
	return h.buckets[len(h.buckets)-1]
}

// processCPU is the user+system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBoltCommit measures the floor under every write path here: one
// bare bbolt commit (dirty pages, fdatasync, meta page, fdatasync) of a
// given number of 4 KiB values, in 1 or 3 databases committing at once
// (three nodes on one disk). The writer pays this at least once per batch,
// whatever it carries:
//
//	go test -run '^$' -bench BoltCommit -benchtime 500x ./raftlog/
func BenchmarkBoltCommit(b *testing.B) {
	for _, dbs := range []int{1, 3} {
		for _, pages := range []int{1, 24} {
			b.Run(fmt.Sprintf("dbs=%d/pages=%d", dbs, pages), func(b *testing.B) {
				benchBoltCommit(b, dbs, pages)
			})
		}
	}
}

func benchBoltCommit(b *testing.B, dbs, pages int) {
	opts := &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType, InitialMmapSize: 1 << 30}
	value := make([]byte, 4000) // one page each, with its header
	all := make([]*bolt.DB, dbs)
	for i := range all {
		db, err := bolt.Open(fmt.Sprintf("%s/bench.db", b.TempDir()), 0o600, opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		all[i] = db
	}
	b.ResetTimer()
	cpu0 := processCPU()
	var wg sync.WaitGroup
	for _, db := range all {
		wg.Go(func() {
			var key [8]byte
			for i := range b.N {
				err := db.Update(func(tx *bolt.Tx) error {
					bk, err := tx.CreateBucketIfNotExists([]byte("b"))
					if err != nil {
						return err
					}
					for p := range pages {
						binary.BigEndian.PutUint64(key[:], uint64(i*pages+p))
						if err := bk.Put(key[:], value); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	commits := float64(b.N * dbs)
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/commits, "cpu-us/commit")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/commit")
}
