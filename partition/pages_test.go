package partition

import (
	"strconv"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// What one checkpoint of a loaded partition carries: about 1,500 accepts a
// second every 100 ms, in log entries of a held batch's usual size.
const (
	checkpointCommands = 150
	entryCommands      = 7
)

// applyInOneTxn applies cmds to m in one state transaction, entryCommands
// to a log entry, as the applier does between two checkpoints.
func applyInOneTxn(tb testing.TB, db *bolt.DB, m *machine, index *uint64, cmds []*rpc.Command) {
	tb.Helper()
	err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(stateBucket)
		if err != nil {
			return err
		}
		for len(cmds) > 0 {
			n := min(entryCommands, len(cmds))
			data, err := rpc.EncodeBatch(cmds[:n]...)
			if err != nil {
				return err
			}
			cmds = cmds[n:]
			*index++
			if _, err := m.apply(b, []raftlog.Entry{{Index: *index, Term: 1, Data: data}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// sendAt returns the i-th of a series of invocations accepted one a
// millisecond, and its Complete. Its id is minted as invocation.Random
// mints them (the creation time after the partition key) or, if
// idempotent, from an idempotency key (a hash).
func sendAt(i int, idempotent bool) (invoke, complete *rpc.Command) {
	inv := newInvoke("greeter", i)
	inv.ProposedAtUnixMs = int64(1_700_000_000_000 + i)
	for b := range 6 {
		inv.InvocationId[8+b] = byte(inv.ProposedAtUnixMs >> (40 - 8*b))
	}
	if idempotent {
		inv.InvocationId = invocation.Idempotent("greeter", "greet", strconv.Itoa(i)).Bytes()
	}
	res := &rpc.Result{Status: 200, Body: inv.Body, ContentType: inv.ContentType, Attempts: 1}
	return invokeCmd(inv), completeCmd(&rpc.Complete{InvocationId: inv.InvocationId, Result: res, ProposedAtUnixMs: inv.ProposedAtUnixMs + 1})
}

// leafFill is the share of the leaf pages' bytes in use in the state's
// nested bucket name, and how many leaf pages it has.
func leafFill(tb testing.TB, db *bolt.DB, name string) (fill float64, pages int) {
	tb.Helper()
	err := db.View(func(tx *bolt.Tx) error {
		st := tx.Bucket(stateBucket).Bucket([]byte(name)).Stats()
		pages = st.LeafPageN
		if st.LeafAlloc > 0 {
			fill = float64(st.LeafInuse) / float64(st.LeafAlloc)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return fill, pages
}

// TestStatePagesFill applies invocations, then their completions, in
// checkpoint-sized transactions, and checks that the buckets whose keys
// grow with time keep their pages well filled: bbolt's default split
// would leave them half empty (docs/benchmarks.md, "State pages").
func TestStatePagesFill(t *testing.T) {
	db := scratchDB(t)
	var m machine
	var index uint64
	const n = 4000
	invokes := make([]*rpc.Command, n)
	completes := make([]*rpc.Command, n)
	for i := range n {
		invokes[i], completes[i] = sendAt(i, false)
	}
	got := map[string]float64{}
	judge := func(names ...string) {
		for _, name := range names {
			fill, pages := leafFill(t, db, name)
			if pages < 10 {
				t.Fatalf("bucket %s has %d leaf pages: too few to judge", name, pages)
			}
			got[name] = fill
		}
	}
	for i := 0; i < n; i += checkpointCommands {
		applyInOneTxn(t, db, &m, &index, invokes[i:min(i+checkpointCommands, n)])
	}
	judge("invocations", "created", "outbox")
	for i := 0; i < n; i += checkpointCommands {
		applyInOneTxn(t, db, &m, &index, completes[i:min(i+checkpointCommands, n)])
	}
	judge("results")
	want := map[string]float64{"invocations": 0.65, "created": 0.8, "outbox": 0.8, "results": 0.8}
	for name, least := range want {
		if got[name] < least {
			t.Errorf("%s: leaf pages %.0f%% full, want at least %.0f%%", name, 100*got[name], 100*least)
		}
	}
}

// BenchmarkCheckpointPages reports what the state's pages cost, in
// checkpoint-sized transactions: the pages bbolt writes per command (the
// checkpoints' I/O), the file's pages per 1,000 commands, and the records'
// leaf fill. accept: invocations only; send: each one completed in the
// next checkpoint; idempotent: accept with ids from idempotency keys.
func BenchmarkCheckpointPages(b *testing.B) {
	for _, mode := range []string{"accept", "send", "idempotent"} {
		b.Run("mode="+mode, func(b *testing.B) {
			db := scratchDB(b)
			var m machine
			var index uint64
			var completes []*rpc.Command
			for i := 0; i < b.N; i += checkpointCommands {
				cmds := completes
				completes = nil
				for j := i; j < min(i+checkpointCommands, b.N); j++ {
					invoke, complete := sendAt(j, mode == "idempotent")
					cmds = append(cmds, invoke)
					if mode == "send" {
						completes = append(completes, complete)
					}
				}
				applyInOneTxn(b, db, &m, &index, cmds)
			}
			applyInOneTxn(b, db, &m, &index, completes)
			b.StopTimer()
			var size int64
			if err := db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
				b.Fatal(err)
			}
			fill, _ := leafFill(b, db, "invocations")
			stats := db.Stats().TxStats
			b.ReportMetric(float64(stats.GetWrite())/float64(b.N), "writes/cmd")
			b.ReportMetric(float64(size/int64(db.Info().PageSize))*1000/float64(b.N), "pages/kcmd")
			b.ReportMetric(100*fill, "records-fill-%")
		})
	}
}
