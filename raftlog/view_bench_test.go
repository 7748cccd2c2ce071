package raftlog

import (
	"context"
	"encoding/binary"
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
	all := reportLatencies(b, lat)
	b.ReportMetric(float64(reads.Load()), "reads")
	b.Logf("%s: %d acknowledgements, %d long reads", mode, all, reads.Load())
}

// BenchmarkInstallBeside: does a large snapshot install of one group hold
// up another group's acknowledgements on the installing node? Three nodes
// over loopback gRPC; group 1 (on nodes 1 and 2) holds 48 MiB in 196,608
// keys of 256 bytes (a partition's records are small); node 3 leads
// group 2, where 16 proposers measure propose-to-acknowledge latency while
// node 3 joins group 1 as a learner and installs its snapshot, loaded in
// one step (as before staging) or in steps of 8 MiB. One install per run:
//
//	go test -run '^$' -bench InstallBeside -benchtime=1x ./raftlog/
func BenchmarkInstallBeside(b *testing.B) {
	for _, mode := range []struct {
		name string
		step int
	}{{"load=one-step", 1 << 40}, {"load=8MiB-steps", 0}} {
		b.Run(mode.name, func(b *testing.B) { benchInstallBeside(b, mode.step) })
	}
}

func benchInstallBeside(b *testing.B, step int) {
	var mu sync.Mutex
	sm2 := map[uint64]*benchSM{}
	c := newGRPCClusterWith(b, 3, []GroupID{MetaGroup, 2}, func(cfg *Config) {
		cfg.SnapshotEntries = 8
		cfg.SnapshotCatchUpEntries = 4
		cfg.Knobs = &Knobs{InstallStepBytes: step}
	}, func(id uint64, gid GroupID) StateMachine {
		mu.Lock()
		defer mu.Unlock()
		sm := &benchSM{}
		if gid == 2 {
			sm2[id] = sm
		}
		return sm
	})
	for _, id := range []uint64{1, 2} {
		if _, err := c.nodes[id].AddGroup(1, []uint64{1, 2}, spreadSM{}); err != nil {
			b.Fatal(err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	var lead1 uint64
	waitFor("a leader of group 1", func() bool {
		for _, id := range []uint64{1, 2} {
			if c.nodes[id].Group(1).Status().IsLeader {
				lead1 = id
				return true
			}
		}
		return false
	})
	g1 := c.nodes[lead1].Group(1)
	const entries, size = 48, 1 << 20
	var last Proposal
	for i := range entries {
		data := make([]byte, size)
		data[0] = byte(i)
		p, err := g1.Propose(context.Background(), data)
		if err != nil {
			b.Fatal(err)
		}
		last = p
	}
	waitFor("group 1 compacted on nodes 1 and 2", func() bool {
		return c.nodes[1].wal.FirstIndex(1) > last.Index/2 && c.nodes[2].wal.FirstIndex(1) > last.Index/2
	})
	if lead := c.leader(b, 2, 10*time.Second); lead != 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := c.nodes[lead].Group(2).TransferLeadership(ctx, 3); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	if c.leader(b, 2, 10*time.Second) != 3 {
		b.Fatal("group 2 not led by node 3")
	}
	learner, err := c.nodes[3].JoinGroup(1, ReplicaID(3, 0), spreadSM{})
	if err != nil {
		b.Fatal(err)
	}
	g2 := c.nodes[3].Group(2)

	var stop atomic.Bool
	const proposers = 16
	payload := make([]byte, 256)
	lat := make([][]time.Duration, proposers)
	var wg sync.WaitGroup
	for w := range proposers {
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Now()
				p, err := g2.Propose(context.Background(), payload)
				if err != nil {
					continue
				}
				ch := make(chan struct{})
				sm2[3].wait(p.Index, ch)
				<-ch
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	b.ResetTimer()
	time.Sleep(200 * time.Millisecond) // a baseline before the install
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if _, err := c.nodes[lead1].Group(1).AddLearner(ctx, c.nodes[lead1].Group(1).Membership(), ReplicaID(3, 0)); err != nil {
		b.Fatal(err)
	}
	cancel()
	waitFor("node 3 to install group 1's snapshot", func() bool { return learner.Status().Applied >= last.Index })
	installed := time.Since(t0)
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	b.StopTimer()
	all := reportLatencies(b, lat)
	b.ReportMetric(float64(installed.Milliseconds()), "install-ms")
	b.Logf("%d acknowledgements of group 2 on node 3; node 3 installed 48 MiB of group 1 in %v", all, installed)
}

// spreadSM stores each entry's data as 256-byte values under keys of their
// own, so a group's state has a partition's shape: many small records.
type spreadSM struct{}

func (spreadSM) Apply(b *bolt.Bucket, ents []Entry) (Applied, error) {
	for _, e := range ents {
		for off := 0; off+256 <= len(e.Data); off += 256 {
			key := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, e.Index), uint64(off))
			if err := b.Put(key, e.Data[off:off+256]); err != nil {
				return Applied{}, err
			}
		}
	}
	return Applied{}, nil
}

func (spreadSM) Restore(*bolt.Bucket) error { return nil }

// reportLatencies reports the p50, p99 and max of the proposers'
// latencies and returns how many there were.
func reportLatencies(b *testing.B, lat [][]time.Duration) int {
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
	return len(all)
}
