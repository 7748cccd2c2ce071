package partition

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// listStore applies entries to a fresh bbolt file through the real Apply
// and returns it with the state bucket's name.
func listStore(tb testing.TB, entries []raftlog.Entry, perTxn int) *bolt.DB {
	tb.Helper()
	db := scratchDB(tb)
	var m machine
	for i := 0; i < len(entries); i += perTxn {
		chunk := entries[i:min(i+perTxn, len(entries))]
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(stateBucket)
			if err != nil {
				return err
			}
			_, err = m.apply(b, chunk)
			return err
		}); err != nil {
			tb.Fatal(err)
		}
	}
	return db
}

// listingLog: n invocations created at ms 1000+i, services svc0..svc(services-1);
// every third completed at 5000+i (every ninth of them failed), then
// a purge of those completed before purgeBefore.
func listingLog(tb testing.TB, n, services int, purgeBefore int64) ([]raftlog.Entry, []*rpc.Invoke) {
	var entries []raftlog.Entry
	var invs []*rpc.Invoke
	add := func(cmds ...*rpc.Command) {
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			tb.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: 1, Data: data})
	}
	const perEntry = 256
	var cmds []*rpc.Command
	flush := func() {
		if len(cmds) > 0 {
			add(cmds...)
			cmds = nil
		}
	}
	for i := range n {
		inv := newInvoke(fmt.Sprintf("svc%d", i%services), i)
		inv.ProposedAtUnixMs = int64(1000 + i)
		if i%2 == 0 {
			inv.IdempotencyKey = fmt.Sprintf("key-%d", i)
		}
		invs = append(invs, inv)
		cmds = append(cmds, invokeCmd(inv))
		if len(cmds) == perEntry {
			flush()
		}
	}
	flush()
	for i, inv := range invs {
		if i%3 != 0 {
			continue
		}
		res := &rpc.Result{Status: 200, Body: []byte("ok")}
		if i%9 == 0 {
			res = &rpc.Result{Status: 500, Failed: true, Error: "boom"}
		}
		cmds = append(cmds, completeCmd(&rpc.Complete{InvocationId: inv.InvocationId, Result: res, ProposedAtUnixMs: int64(5000 + i)}))
		if len(cmds) == perEntry {
			flush()
		}
	}
	flush()
	if purgeBefore > 0 {
		add(purgeCmd(&rpc.Purge{BeforeUnixMs: purgeBefore}))
	}
	return entries, invs
}

func listPage(tb testing.TB, db *bolt.DB, req *rpc.ListInvocations) *rpc.InvocationList {
	tb.Helper()
	var out *rpc.InvocationList
	if err := db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = listInvocations(tx.Bucket(stateBucket), req, idleInvoker{})
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// listAll pages through every match, checking that pages are newest first
// and that each resumes below the previous one.
func listAll(t *testing.T, db *bolt.DB, req *rpc.ListInvocations) []*rpc.InvocationRecord {
	t.Helper()
	var all []*rpc.InvocationRecord
	var prev []byte
	for range 10000 {
		page := listPage(t, db, req)
		for _, rec := range page.Records {
			pos := positionOf(rec)
			if prev != nil && bytes.Compare(pos, prev) >= 0 {
				t.Fatalf("record %x not older than the one before", rec.Invoke.InvocationId)
			}
			prev = pos
			all = append(all, rec)
		}
		if page.Resume == nil {
			return all
		}
		req.Before = page.Resume
	}
	t.Fatal("listing never ended")
	return nil
}

func TestListingFiltersAndPages(t *testing.T) {
	entries, invs := listingLog(t, 300, 3, 5000+30)
	db := listStore(t, entries, 5)
	purged := func(i int) bool { return i%3 == 0 && 5000+i < 5030 }
	want := func(keep func(i int, inv *rpc.Invoke) bool) []string {
		var ids []string
		for i := len(invs) - 1; i >= 0; i-- {
			if !purged(i) && keep(i, invs[i]) {
				ids = append(ids, fmt.Sprintf("%x", invs[i].InvocationId))
			}
		}
		return ids
	}
	cases := []struct {
		name string
		req  *rpc.ListInvocations
		keep func(i int, inv *rpc.Invoke) bool
	}{
		{"all", &rpc.ListInvocations{Limit: 7}, func(int, *rpc.Invoke) bool { return true }},
		{"service", &rpc.ListInvocations{Service: "svc1", Limit: 10}, func(_ int, inv *rpc.Invoke) bool { return inv.Service == "svc1" }},
		{"handler", &rpc.ListInvocations{Handler: "other"}, func(int, *rpc.Invoke) bool { return false }},
		{"pending", &rpc.ListInvocations{Status: rpc.ListInvocations_PENDING, Limit: 50}, func(i int, _ *rpc.Invoke) bool { return i%3 != 0 }},
		{"completed", &rpc.ListInvocations{Status: rpc.ListInvocations_COMPLETED, Limit: 50}, func(i int, _ *rpc.Invoke) bool { return i%3 == 0 }},
		{"failed", &rpc.ListInvocations{Status: rpc.ListInvocations_FAILED}, func(i int, _ *rpc.Invoke) bool { return i%9 == 0 }},
		{"key", &rpc.ListInvocations{IdempotencyKey: "key-42"}, func(i int, _ *rpc.Invoke) bool { return i == 42 }},
		{"window", &rpc.ListInvocations{CreatedAfterUnixMs: 1100, CreatedBeforeUnixMs: 1200, Limit: 9},
			func(i int, _ *rpc.Invoke) bool { return i >= 100 && i < 200 }},
		// A scan bound far below the store: pages come back short (even
		// empty) with a resume position, and paging still finds all.
		{"bounded scan", &rpc.ListInvocations{Service: "svc0", Status: rpc.ListInvocations_FAILED, MaxScan: 11},
			func(i int, inv *rpc.Invoke) bool { return inv.Service == "svc0" && i%9 == 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, rec := range listAll(t, db, tc.req) {
				got = append(got, fmt.Sprintf("%x", rec.Invoke.InvocationId))
				if len(rec.Invoke.Body) != 0 || len(rec.GetResult().GetBody()) != 0 {
					t.Fatalf("listing carries bodies: %v", rec)
				}
			}
			if w := want(tc.keep); fmt.Sprint(got) != fmt.Sprint(w) {
				t.Fatalf("got %d records, want %d:\n got  %v\n want %v", len(got), len(w), got, w)
			}
		})
	}
	t.Run("scan bound holds", func(t *testing.T) {
		page := listPage(t, db, &rpc.ListInvocations{Service: "none", MaxScan: 20})
		if page.Scanned != 20 || len(page.Records) != 0 || page.Resume == nil {
			t.Fatalf("scanned %d, %d records, resume %x; want 20, 0, a position", page.Scanned, len(page.Records), page.Resume)
		}
	})
}

// The index is part of the replicated state: replicas fed the same log in
// different transaction sizes store the same bytes, and Purge removes the
// index entries of what it drops.
func TestListingIndexDeterministicAndPurged(t *testing.T) {
	entries, _ := listingLog(t, 120, 2, 1<<40)
	a, b := applyAll(t, entries, 1).dump(t), applyAll(t, entries, 13).dump(t)
	if a != b {
		t.Fatal("replicas differ")
	}
	db := listStore(t, entries, 4)
	var indexed, records int
	if err := db.View(func(tx *bolt.Tx) error {
		st := tx.Bucket(stateBucket)
		indexed = st.Bucket(createdBucket).Stats().KeyN
		records = st.Bucket(invocationsBucket).Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if indexed != records || records != 80 {
		t.Fatalf("%d index entries, %d records; want 80 of each (40 purged)", indexed, records)
	}
}

// State written before the index existed is indexed at the first apply.
func TestListingIndexBuiltForOlderState(t *testing.T) {
	entries, _ := listingLog(t, 50, 1, 0)
	db := listStore(t, entries[:len(entries)-1], 100)
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(stateBucket).DeleteBucket(createdBucket) }); err != nil {
		t.Fatal(err)
	}
	var m machine
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := m.apply(tx.Bucket(stateBucket), entries[len(entries)-1:])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := listPage(t, db, &rpc.ListInvocations{Limit: 100}); len(got.Records) != 50 {
		t.Fatalf("listed %d, want 50", len(got.Records))
	}
}

func TestCompletedRecordKeepsRequestPreview(t *testing.T) {
	inv := newInvoke("svc", 0)
	inv.Body = bytes.Repeat([]byte("x"), RequestPreviewBytes+10)
	inv.ProposedAtUnixMs = 1
	e1, _ := rpc.EncodeBatch(invokeCmd(inv))
	e2, _ := rpc.EncodeBatch(completeCmd(&rpc.Complete{InvocationId: inv.InvocationId, Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: 2}))
	db := listStore(t, []raftlog.Entry{{Index: 1, Term: 1, Data: e1}, {Index: 2, Term: 1, Data: e2}}, 1)
	if err := db.View(func(tx *bolt.Tx) error {
		rec, _, err := getRecord(tx.Bucket(stateBucket), inv.InvocationId)
		if err != nil {
			return err
		}
		if len(rec.Invoke.Body) != RequestPreviewBytes || rec.RequestBodyBytes != uint32(len(inv.Body)) {
			t.Fatalf("kept %d of %d bytes (recorded %d)", len(rec.Invoke.Body), len(inv.Body), rec.RequestBodyBytes)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkListPage1M times one page of the listing over a store of one
// million retained (completed) invocations filled through the real Apply
// (RAFTGATE_LIST_BENCH_N overrides the size for a quick run). Run with
// -benchtime=200x: the fill is done once, outside the timer.
func BenchmarkListPage1M(b *testing.B) {
	n := envInt(b, "RAFTGATE_LIST_BENCH_N", 1_000_000)
	entries, _ := listingLog(b, n, 100, 0)
	// Complete the other two thirds too: every invocation is a retained result.
	var extra []*rpc.Command
	for _, e := range entries {
		batch, _ := rpc.DecodeBatch(e.Data)
		for _, c := range batch.Commands {
			if inv := c.GetInvoke(); inv != nil {
				extra = append(extra, completeCmd(&rpc.Complete{InvocationId: inv.InvocationId,
					Result: &rpc.Result{Status: 200, Body: []byte("ok")}, ProposedAtUnixMs: inv.ProposedAtUnixMs + 1}))
			}
		}
	}
	for i := 0; i < len(extra); i += 256 {
		data, err := rpc.EncodeBatch(extra[i:min(i+256, len(extra))]...)
		if err != nil {
			b.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: 1, Data: data})
	}
	db := listStore(b, entries, 16)
	cases := []struct {
		name string
		req  *rpc.ListInvocations
	}{
		{"newest50", &rpc.ListInvocations{Limit: 50}},
		{"service1pct", &rpc.ListInvocations{Service: "svc7", Limit: 50}},
		{"failed", &rpc.ListInvocations{Status: rpc.ListInvocations_FAILED, Limit: 50}},
		{"nomatch", &rpc.ListInvocations{Service: "absent", Limit: 50}},
		{"keyNomatch", &rpc.ListInvocations{IdempotencyKey: "absent", Limit: 50}},
		{"deepCursor", &rpc.ListInvocations{Limit: 50, Before: rpc.ListPosition(int64(1000+n/2), make([]byte, invocation.IDLen))}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			var scanned, found int
			for b.Loop() {
				page := listPage(b, db, tc.req)
				scanned, found = int(page.Scanned), len(page.Records)
			}
			b.ReportMetric(float64(scanned), "scanned/page")
			b.ReportMetric(float64(found), "records/page")
		})
	}
}

func envInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// The console's "accepted" figure counts new invocations, not repeats.
func TestAcceptedCountsNewInvocationsOnly(t *testing.T) {
	a, b := newInvoke("svc", 0), newInvoke("svc", 1)
	data, err := rpc.EncodeBatch(invokeCmd(a), invokeCmd(a), invokeCmd(b))
	if err != nil {
		t.Fatal(err)
	}
	db := listStore(t, nil, 1)
	var m machine
	var fx *effects
	if err := db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(stateBucket)
		if err != nil {
			return err
		}
		fx, err = m.apply(bk, []raftlog.Entry{{Index: 1, Term: 1, Data: data}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if fx.accepted != 2 || fx.applied[kindInvoke] != 3 {
		t.Fatalf("accepted %d of %d invokes, want 2 of 3", fx.accepted, fx.applied[kindInvoke])
	}
}

// Exclusive handlers of one key: the first is pending, the next queued, a
// delayed one scheduled; the listing filters on each and names the key.
func TestListingKeyedStates(t *testing.T) {
	k := newKeyMachine(t)
	first := k.invoke("first", "alice", true, 0)
	second := k.invoke("second", "alice", true, 0)
	later := k.invoke("later", "alice", true, 60_000)
	for status, want := range map[rpc.ListInvocations_Status][]byte{
		rpc.ListInvocations_PENDING:   first,
		rpc.ListInvocations_QUEUED:    second,
		rpc.ListInvocations_SCHEDULED: later,
	} {
		page := listPage(t, k.db, &rpc.ListInvocations{Status: status})
		if len(page.Records) != 1 || !bytes.Equal(page.Records[0].Invoke.InvocationId, want) || page.Records[0].Invoke.Key != "alice" {
			t.Errorf("status %v: listed %v, want only %s", status, page.Records, k.names[string(want)])
		}
	}
}

// TestListingByObjectKey: the key filter keeps the invocations of one
// object key and no other.
func TestListingByObjectKey(t *testing.T) {
	k := newKeyMachine(t)
	alice := k.invoke("a1", "alice", true, 0)
	k.invoke("b1", "bob", true, 0)
	alice2 := k.invoke("a2", "alice", false, 0)
	page := listPage(t, k.db, &rpc.ListInvocations{Key: "alice"})
	var got [][]byte
	for _, r := range page.Records {
		got = append(got, r.Invoke.InvocationId)
	}
	if len(got) != 2 || !bytes.Equal(got[0], alice2) || !bytes.Equal(got[1], alice) {
		t.Fatalf("key alice listed %d records, want a2 then a1", len(got))
	}
	if page := listPage(t, k.db, &rpc.ListInvocations{Key: "carol"}); len(page.Records) != 0 {
		t.Fatalf("key carol listed %d records, want none", len(page.Records))
	}
}

// idleInvoker is a liveView with nothing delivered or held.
type idleInvoker struct{}

func (idleInvoker) isDelivering([]byte) bool { return false }
func (idleInvoker) heldByOf([]byte) string   { return "" }
