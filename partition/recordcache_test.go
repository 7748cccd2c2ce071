package partition

import (
	"errors"
	"fmt"
	"testing"

	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// sendLog is a log shaped like sends that complete within one checkpoint
// interval: each invocation's Invoke, then in later entries what the
// invoker proposes for it (failed attempts, a duplicate Invoke, a
// Complete, a Cancel), exclusive invocations of one key that queue behind
// each other and hand the key on, a purge, and an Invoke of a purged id.
func sendLog(t testing.TB) (entries []raftlog.Entry, ids [][]byte) {
	add := func(cmds ...*rpc.Command) {
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: 1, Data: data})
	}
	var invokes []*rpc.Invoke
	for i := range 12 {
		inv := newInvoke("greeter", i)
		inv.ProposedAtUnixMs = int64(100 + i)
		if i >= 8 { // one object key: 8 runs, 9..11 queue behind it
			inv.Service, inv.Key, inv.Exclusive = "obj", "k", true
		}
		invokes = append(invokes, inv)
		ids = append(ids, inv.InvocationId)
	}
	add(invokeCmd(invokes[0]), invokeCmd(invokes[1]), invokeCmd(invokes[2]))
	add(completeCmd(&rpc.Complete{InvocationId: ids[0], Result: &rpc.Result{Status: 200, Body: []byte("r0")}, ProposedAtUnixMs: 200}))
	add(invokeCmd(invokes[3]), invokeCmd(invokes[4]), invokeCmd(invokes[5]), invokeCmd(invokes[6]), invokeCmd(invokes[7]))
	add(attemptFailedCmd(&rpc.AttemptFailed{InvocationId: ids[1], Attempt: 1, Error: "503", RetryAtUnixMs: 300}),
		attemptFailedCmd(&rpc.AttemptFailed{InvocationId: ids[1], Attempt: 1, Error: "stale", RetryAtUnixMs: 1}),
		invokeCmd(invokes[1])) // a retry of the request: reports the record the failure changed
	add(attemptFailedCmd(&rpc.AttemptFailed{InvocationId: ids[1], Attempt: 2, Error: "504", RetryAtUnixMs: 400}),
		completeCmd(&rpc.Complete{InvocationId: ids[1], Result: &rpc.Result{Status: 200, Attempts: 3}, ProposedAtUnixMs: 410}),
		completeCmd(&rpc.Complete{InvocationId: ids[1], Result: &rpc.Result{Status: 500}, ProposedAtUnixMs: 420})) // too late
	add(cancelCmd(&rpc.Cancel{InvocationId: ids[2], RequestId: []byte("c"), ProposedAtUnixMs: 250}),
		completeCmd(&rpc.Complete{InvocationId: ids[3], Result: &rpc.Result{Status: 201}, ProposedAtUnixMs: 260}))
	add(invokeCmd(invokes[8]), invokeCmd(invokes[9]), invokeCmd(invokes[10]), invokeCmd(invokes[11]))
	add(cancelCmd(&rpc.Cancel{InvocationId: ids[10], RequestId: []byte("q"), ProposedAtUnixMs: 270}))              // queued
	add(completeCmd(&rpc.Complete{InvocationId: ids[8], Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: 280})) // 9 runs
	add(attemptFailedCmd(&rpc.AttemptFailed{InvocationId: ids[9], Attempt: 1, Error: "e", RetryAtUnixMs: 500}),
		completeCmd(&rpc.Complete{InvocationId: ids[9], Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: 290})) // 11 runs
	add(purgeCmd(&rpc.Purge{BeforeUnixMs: 255, ProposedAtUnixMs: 600})) // drops 0 and 2
	add(invokeCmd(invokes[0]), invokeCmd(invokes[4]))                   // a purged id starts afresh; 4 is pending
	add(completeCmd(&rpc.Complete{InvocationId: ids[0], Result: &rpc.Result{Status: 202}, ProposedAtUnixMs: 700}),
		completeCmd(&rpc.Complete{InvocationId: ids[11], Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: 710}))
	return entries, ids
}

// TestRecordCacheStoresWhatTheBucketStores: sendLog applied in one
// transaction, one Apply per entry (Completes read what the machine cached
// from the Invokes), stores the same bytes as applied one transaction per
// entry (what a committed transaction cached is read in the next) and as
// applied by a machine that restarts before every entry (a follower
// restarting between Invoke and Complete: every read a miss).
func TestRecordCacheStoresWhatTheBucketStores(t *testing.T) {
	entries, ids := sendLog(t)
	db := scratchDB(t)
	var cached, perTxn, restarting string
	scratchTx(t, db, func(fresh func(string) *bolt.Bucket) {
		var m machine
		b := fresh("cached")
		for i, e := range entries {
			if _, err := m.apply(b, []raftlog.Entry{e}); err != nil {
				t.Fatal(err)
			}
			if i == 0 && m.records.get(ids[1]) == nil {
				t.Fatal("the Invoke's record is not cached: the test would compare misses only")
			}
		}
		cached = dumpBucket(t, b)
		b = fresh("restarting")
		for _, e := range entries {
			var restarted machine
			if _, err := restarted.apply(b, []raftlog.Entry{e}); err != nil {
				t.Fatal(err)
			}
		}
		restarting = dumpBucket(t, b)
	})
	perTxn = applyAll(t, entries, 1).dump(t)
	if cached != perTxn {
		t.Fatalf("one transaction differs from one transaction per entry:\n%s\n---\n%s", cached, perTxn)
	}
	if cached != restarting {
		t.Fatalf("one machine differs from a machine restarted before every entry:\n%s\n---\n%s", cached, restarting)
	}
}

// TestRecordCacheForgetsRolledBack: records cached in a transaction that
// is rolled back are not served in the next one (the Complete finds no
// record, as on a replica that never applied the Invoke); records cached
// in a transaction that commits are kept for the next.
func TestRecordCacheForgetsRolledBack(t *testing.T) {
	entries, ids := sendLog(t)
	db := scratchDB(t)
	var m machine
	apply := func(e raftlog.Entry, rollback bool) {
		t.Helper()
		errRollback := errors.New("rollback")
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(stateBucket)
			if err != nil {
				return err
			}
			if _, err := m.apply(b, []raftlog.Entry{e}); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		if rollback && !errors.Is(err, errRollback) || !rollback && err != nil {
			t.Fatal(err)
		}
	}
	apply(entries[0], true)  // Invoke 0..2, rolled back
	apply(entries[1], false) // Complete 0: no record, a no-op
	var found bool
	if err := db.View(func(tx *bolt.Tx) error {
		var err error
		_, found, err = getRecord(tx.Bucket(stateBucket), ids[0])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Fatal("a Complete recorded an invocation whose Invoke was rolled back")
	}
	apply(entries[2], false) // Invoke 3..7, committed
	if n := len(m.records.recs); n != 5 {
		t.Fatalf("%d records cached after the commit, want the 5 it stored", n)
	}
	apply(entries[3], true) // rolled back: the next use drops them all
	apply(entries[4], false)
	if m.records.get(ids[3]) != nil {
		t.Fatal("a record cached before a rolled-back transaction is still served")
	}
}

// The cache keeps to its bounds: a record past them is stored, not cached.
func TestRecordCacheBounded(t *testing.T) {
	var c recordCache
	big := newInvoke("greeter", 0)
	big.Body = make([]byte, maxCachedBytes)
	c.put(&rpc.InvocationRecord{Invoke: big, State: rpc.InvocationRecord_PENDING})
	if c.get(big.InvocationId) != nil || c.bytes != 0 {
		t.Fatalf("a record larger than the cache was cached (%d bytes)", c.bytes)
	}
	for i := range maxCachedRecords + 1 {
		c.put(&rpc.InvocationRecord{Invoke: newInvoke("greeter", i), State: rpc.InvocationRecord_PENDING})
	}
	if n := len(c.recs); n != maxCachedRecords {
		t.Fatalf("%d records cached, want at most %d", n, maxCachedRecords)
	}
	for id, cr := range c.recs {
		cr.rec.State = rpc.InvocationRecord_COMPLETED
		c.put(cr.rec)
		if _, ok := c.recs[id]; ok {
			t.Fatal("a completed record stayed cached")
		}
	}
	if c.bytes != 0 {
		t.Fatalf("%d bytes counted in an empty cache", c.bytes)
	}
}

// A failed Apply drops the cache (the group stops; raftlog rolls back).
func TestRecordCacheDroppedWhenApplyFails(t *testing.T) {
	entries, _ := sendLog(t)
	db := scratchDB(t)
	bad := raftlog.Entry{Index: 99, Term: 1, Data: []byte{0xff}}
	_ = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(stateBucket)
		if err != nil {
			t.Fatal(err)
		}
		var m machine
		if _, err := m.apply(b, []raftlog.Entry{entries[0], bad}); err == nil {
			t.Fatal("a malformed entry applied")
		}
		if n := len(m.records.recs); n != 0 {
			t.Fatalf("%d records cached after a failed Apply", n)
		}
		return fmt.Errorf("rollback")
	})
}
