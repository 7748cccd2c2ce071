package raftlog

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkLongRead: does a long read of one group hold up another group's
// acknowledgements on the same node? Three nodes over loopback gRPC with
// fsync'd state, groups 1 and 2 led by node 1; 16 proposers on group 2
// measure propose-to-acknowledge latency while a reader on node 1 reads
// group 1 for 1 s at a time (100 ms apart), through View (on the applier
// every group shares) or ViewCheckpoint (beside it), or not at all. The
// read holds its transaction for 1 s (a slow consumer); "checkpoint-cpu"
// walks the bucket for 1 s instead, taking a core the nodes want too. Run:
//
//	go test -run '^$' -bench LongRead -benchtime=4000x ./raftlog/
func BenchmarkLongRead(b *testing.B) {
	for _, mode := range []string{"none", "view", "checkpoint", "checkpoint-cpu"} {
		b.Run("read="+mode, func(b *testing.B) { benchLongRead(b, mode) })
	}
}

func benchLongRead(b *testing.B, mode string) {
	sms := map[uint64]map[GroupID]*benchSM{}
	var mu sync.Mutex
	c := newGRPCClusterWith(b, 3, []GroupID{MetaGroup, 1, 2}, nil, func(id uint64, gid GroupID) StateMachine {
		mu.Lock()
		defer mu.Unlock()
		if sms[id] == nil {
			sms[id] = map[GroupID]*benchSM{}
		}
		sm := &benchSM{}
		sms[id][gid] = sm
		return sm
	})
	for _, gid := range []GroupID{1, 2} {
		if lead := c.leader(b, gid, 10*time.Second); lead != 1 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := c.nodes[lead].Group(gid).TransferLeadership(ctx, 1); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	}
	c.leader(b, MetaGroup, 10*time.Second)
	if c.leader(b, 1, 10*time.Second) != 1 || c.leader(b, 2, 10*time.Second) != 1 {
		b.Fatal("groups 1 and 2 not led by node 1")
	}
	g1, g2, sm2 := c.nodes[1].Group(1), c.nodes[1].Group(2), sms[1][2]
	// Something to read in group 1.
	for range 100 {
		if _, err := g1.Propose(context.Background(), make([]byte, 256)); err != nil {
			b.Fatal(err)
		}
	}

	stopReads := make(chan struct{})
	var reads atomic.Int64
	var readers sync.WaitGroup
	if mode != "none" {
		read := g1.View
		if mode != "view" {
			read = g1.ViewCheckpoint
		}
		readers.Go(func() {
			for {
				select {
				case <-stopReads:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if err := read(context.Background(), func(bk *bolt.Bucket) error {
					if mode != "checkpoint-cpu" {
						time.Sleep(time.Second)
						return nil
					}
					for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
						_ = bk.ForEach(func(k, v []byte) error { return nil })
					}
					return nil
				}); err != nil {
					b.Error(err)
					return
				}
				reads.Add(1)
			}
		})
	}

	const proposers = 16
	payload := make([]byte, 256)
	var next atomic.Int64
	lat := make([][]time.Duration, proposers)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range proposers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				p, err := g2.Propose(context.Background(), payload)
				if err != nil {
					continue
				}
				ch := make(chan struct{})
				sm2.wait(p.Index, ch)
				<-ch
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(stopReads)
	readers.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		b.Fatal("no proposal succeeded")
	}
	pct := func(q float64) float64 {
		return float64(all[min(len(all)-1, int(q*float64(len(all))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(1), "max-ms")
	b.ReportMetric(float64(reads.Load()), "reads")
	b.Logf("%s: %d acknowledgements, %d long reads", mode, len(all), reads.Load())
}
