package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkApplyInvoke measures applied Invoke commands per second: pure
// Apply over bbolt (no fsync: CPU cost of the state machine), with
// perEntry commands batched in each log entry and 8 entries per transaction
// (raftlog applies a Ready's entries in one transaction).
func BenchmarkApplyInvoke(b *testing.B) {
	for _, perEntry := range []int{1, 16, 128, 512} {
		b.Run(fmt.Sprintf("perEntry=%d", perEntry), func(b *testing.B) {
			db := scratchDB(b)
			// Pre-build the log so encoding is not measured.
			total := b.N
			var entries []raftlog.Entry
			for i := 0; i < total; i += perEntry {
				n := min(perEntry, total-i)
				cmds := make([]*rpc.Command, n)
				for j := range cmds {
					inv := newInvoke("greeter", i+j)
					inv.ProposedAtUnixMs = int64(i + j)
					cmds[j] = invokeCmd(inv)
				}
				data, err := rpc.EncodeBatch(cmds...)
				if err != nil {
					b.Fatal(err)
				}
				entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: 1, Data: data})
			}
			b.ResetTimer()
			applyInTxns(b, db, entries, false)
			b.StopTimer()
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "cmds/s")
		})
	}
}

// BenchmarkApplyInvokeComplete measures the apply side of a /send: each
// log entry's perEntry Invokes are completed, with an echoed result, in
// the next entry of the same transaction (as when the service answers
// within the checkpoint interval). mixed=true: that next entry also holds
// the next perEntry Invokes, as the proposer loop batches the ingress's
// Invokes with the invoker's Completes; mixed=false: Invokes and Completes
// in entries of their own. It reports the cost per send (one Invoke plus
// one Complete).
func BenchmarkApplyInvokeComplete(b *testing.B) {
	for _, mixed := range []bool{false, true} {
		for _, perEntry := range []int{1, 16, 128} {
			b.Run(fmt.Sprintf("mixed=%v/perEntry=%d", mixed, perEntry), func(b *testing.B) {
				benchApplySends(b, perEntry, mixed)
			})
		}
	}
}

func benchApplySends(b *testing.B, perEntry int, mixed bool) {
	db := scratchDB(b)
	var entries []raftlog.Entry
	add := func(cmds []*rpc.Command) {
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			b.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: 1, Data: data})
	}
	var completes []*rpc.Command // of the last entry's Invokes
	for i := 0; i < b.N; i += perEntry {
		n := min(perEntry, b.N-i)
		invokes := make([]*rpc.Command, n)
		next := make([]*rpc.Command, n)
		for j := range n {
			inv := newInvoke("greeter", i+j)
			inv.ProposedAtUnixMs = int64(i + j)
			invokes[j] = invokeCmd(inv)
			res := &rpc.Result{Status: 200, Body: inv.Body, ContentType: inv.ContentType, Attempts: 1}
			next[j] = completeCmd(&rpc.Complete{InvocationId: inv.InvocationId, Result: res, ProposedAtUnixMs: int64(i + j + 1)})
		}
		if mixed {
			add(append(completes, invokes...))
		} else {
			add(invokes)
			add(next)
			next = nil
		}
		completes = next
	}
	if len(completes) > 0 {
		add(completes)
	}
	b.ResetTimer()
	applyInTxns(b, db, entries, true)
}

// applyInTxns applies entries to one machine, entriesPerTxn entries per
// transaction (raftlog applies a Ready's entries in one transaction):
// in one Apply per transaction, or in one Apply per entry (perEntry), as
// raftlog's batches of one group often are.
func applyInTxns(b *testing.B, db *bolt.DB, entries []raftlog.Entry, perEntry bool) {
	const entriesPerTxn = 8
	var m machine
	for i := 0; i < len(entries); i += entriesPerTxn {
		chunk := entries[i:min(i+entriesPerTxn, len(entries))]
		if err := db.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists(stateBucket)
			if err != nil {
				return err
			}
			if !perEntry {
				_, err = m.apply(bk, chunk)
				return err
			}
			for _, e := range chunk {
				if _, err := m.apply(bk, []raftlog.Entry{e}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRaftClusterAppend measures acknowledged Appends per second on a
// three-node in-process cluster (real raftlog, bbolt with fsync, gRPC on
// 127.0.0.1) at 64 and 512 concurrent submitters. invoker=on: the leader
// delivers every invocation to a local HTTP service meanwhile (each adds a
// Complete to the log); invoker=off: deliveries are parked (one blocked
// call), so only Invokes are in the log.
func BenchmarkRaftClusterAppend(b *testing.B) {
	for _, mode := range []string{"on", "off"} {
		for _, submitters := range []int{64, 512} {
			b.Run(fmt.Sprintf("invoker=%s/submitters=%d", mode, submitters), func(b *testing.B) {
				benchClusterAppend(b, submitters, mode == "on", 0)
			})
		}
	}
}

// BenchmarkRaftClusterAppendUnbatched is the invoker=off case with one
// command per log entry, to show what batching buys.
func BenchmarkRaftClusterAppendUnbatched(b *testing.B) {
	for _, submitters := range []int{64, 512} {
		b.Run(fmt.Sprintf("submitters=%d", submitters), func(b *testing.B) {
			benchClusterAppend(b, submitters, false, 1)
		})
	}
}

func benchClusterAppend(b *testing.B, submitters int, invoker bool, maxBatch int) {
	svc := newRecordingService(b)
	regs := []*prometheus.Registry{}
	configure := func(cfg *Config) {
		if maxBatch > 0 {
			cfg.MaxBatchCommands = maxBatch
		}
		if !invoker {
			cfg.Invoker.Concurrency = 1
		}
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		cfg.Registerer = reg
	}
	if !invoker {
		svc.block = make(chan struct{})
		defer close(svc.block)
	}
	c := newRaftCluster(b, 3, configure)
	c.register(b, &rpc.Service{Name: "greeter", Url: svc.srv.URL})
	invs := make([]*rpc.Invoke, b.N)
	for i := range invs {
		invs[i] = newInvoke("greeter", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	_, wait := c.submitting(b, ctx, invs, submitters)
	wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	var sum float64
	var count uint64
	for _, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "raftgate_partition_proposal_commands" {
				h := mf.GetMetric()[0].GetHistogram()
				sum += h.GetSampleSum()
				count += h.GetSampleCount()
			}
		}
	}
	if count > 0 {
		b.ReportMetric(sum/float64(count), "cmds/entry")
	}
}
