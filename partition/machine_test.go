package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// applyAll applies entries to a fresh bbolt file, in chunks of chunk
// entries per transaction, and returns the replica holding the state.
func applyAll(t testing.TB, entries []raftlog.Entry, chunk int) *replica {
	t.Helper()
	db := scratchDB(t)
	var m machine
	for i := 0; i < len(entries); i += chunk {
		batch := entries[i:min(i+chunk, len(entries))]
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(stateBucket)
			if err != nil {
				return err
			}
			_, err = m.apply(b, batch)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return &replica{db: db}
}

// mixedLog builds a log exercising every command, duplicates and stale
// reports included, over 40 invocations (ids[i] is invocation i). What
// each ends as is in TestReplicasFedTheSameLogStoreTheSameBytes.
func mixedLog(t testing.TB) (entries []raftlog.Entry, ids [][]byte) {
	add := func(term uint64, cmds ...*rpc.Command) {
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: term, Data: data})
	}
	for i := range 40 {
		inv := newInvoke(fmt.Sprintf("svc%d", i%3), i)
		inv.ProposedAtUnixMs = int64(1000 + i)
		if i%5 == 0 {
			inv.NotBeforeUnixMs = int64(5000 + i)
		}
		ids = append(ids, inv.InvocationId)
		add(1, invokeCmd(inv), invokeCmd(inv)) // duplicate in the same entry
	}
	for i, id := range ids {
		switch i % 4 {
		case 0:
			add(2, completeCmd(&rpc.Complete{InvocationId: id, Result: &rpc.Result{Status: 200, Body: []byte("ok")}, ProposedAtUnixMs: int64(2000 + i)}))
			add(3, completeCmd(&rpc.Complete{InvocationId: id, Result: &rpc.Result{Status: 500}, ProposedAtUnixMs: int64(9000 + i)}))
		case 1:
			add(2, attemptFailedCmd(&rpc.AttemptFailed{InvocationId: id, Attempt: 1, Error: "503", RetryAtUnixMs: int64(3000 + i)}))
			add(2, attemptFailedCmd(&rpc.AttemptFailed{InvocationId: id, Attempt: 1, Error: "stale", RetryAtUnixMs: 1}))
		case 2:
			add(2, cancelCmd(&rpc.Cancel{InvocationId: id, RequestId: []byte("r"), ProposedAtUnixMs: int64(2500 + i)}))
		}
	}
	add(4, purgeCmd(&rpc.Purge{BeforeUnixMs: 2020}))
	return entries, ids
}

// TestReplicasFedTheSameLogStoreTheSameBytes applies mixedLog in one
// entry per transaction and in chunks of seven: both store the same bytes,
// and every invocation ends as the log says.
func TestReplicasFedTheSameLogStoreTheSameBytes(t *testing.T) {
	entries, ids := mixedLog(t)
	one, seven := applyAll(t, entries, 1), applyAll(t, entries, 7)
	if a, b := one.dump(t), seven.dump(t); a != b {
		t.Fatalf("replicas differ:\n%s\n---\n%s", a, b)
	}
	err := one.View(context.Background(), func(b *bolt.Bucket) error {
		for i, id := range ids {
			rec, res, err := readInvocation(b, id)
			if err != nil {
				return err
			}
			if err := expectMixed(i, rec, res); err != nil {
				return fmt.Errorf("invocation %d: %w", i, err)
			}
		}
		// Invocations 1, 3, 5, ... are pending: one delivery each, the
		// duplicate Invoke in the same entry added none.
		if n := outbox.Count(b); n != 20 {
			return fmt.Errorf("outbox holds %d deliveries, want 20", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// expectMixed checks what invocation i of mixedLog ends as.
func expectMixed(i int, rec *rpc.InvocationRecord, res *rpc.InvocationResult) error {
	completed := func(at int64, status uint32, failed bool, body, errText string) error {
		switch {
		case rec == nil || rec.State != rpc.InvocationRecord_COMPLETED || res == nil:
			return fmt.Errorf("record %v, result %v; want completed", rec, res)
		case rec.CompletedAtUnixMs != at || res.CompletedAtUnixMs != at:
			return fmt.Errorf("completed at %d (result %d), want %d", rec.CompletedAtUnixMs, res.CompletedAtUnixMs, at)
		case res.Result.Status != status || res.Result.Failed != failed || string(res.Result.Body) != body || res.Result.Error != errText:
			return fmt.Errorf("result %v, want status %d failed %v body %q error %q", res.Result, status, failed, body, errText)
		}
		return nil
	}
	pending := func(attempts uint32, lastError string, retryAt int64) error {
		switch {
		case rec == nil || rec.State != rpc.InvocationRecord_PENDING || res != nil:
			return fmt.Errorf("record %v, result %v; want pending", rec, res)
		case rec.Attempts != attempts || rec.LastError != lastError || rec.RetryAtUnixMs != retryAt:
			return fmt.Errorf("attempts %d, last error %q, retry at %d; want %d, %q, %d",
				rec.Attempts, rec.LastError, rec.RetryAtUnixMs, attempts, lastError, retryAt)
		case rec.AcceptedAtUnixMs != int64(1000+i):
			return fmt.Errorf("accepted at %d, want %d", rec.AcceptedAtUnixMs, 1000+i)
		}
		return nil
	}
	switch i % 4 {
	case 0: // completed at 2000+i; the later Complete is ignored; Purge{2020} drops it if older
		if 2000+i < 2020 {
			if rec != nil {
				return fmt.Errorf("purged invocation still has record %v", rec)
			}
			return nil
		}
		return completed(int64(2000+i), 200, false, "ok", "")
	case 1: // one failed attempt; the stale report of the same attempt is ignored
		return pending(1, "503", int64(3000+i))
	case 2: // cancelled
		return completed(int64(2500+i), 409, true, "", "cancelled")
	default: // untouched
		return pending(0, "", 0)
	}
}

// The same over the processor and the fake cluster: three replicas with
// live invokers and a leader change end with identical state.
func TestReplicasIdenticalAfterWorkload(t *testing.T) {
	svc := newRecordingService(t)
	c := newFakeCluster(t, 3, func(_ int, cfg *Config) { cfg.Services = svc.lookup("greeter") })
	c.setLeader(0, false)
	var invs []*rpc.Invoke
	for i := range 30 {
		inv := newInvoke("greeter", i)
		if _, err := c.replicas[0].p.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		invs = append(invs, inv)
	}
	c.setLeader(2, true)
	for _, inv := range invs {
		awaitOutput(t, c.replicas[2].p, inv.InvocationId)
	}
	c.waitApplied()
	d0 := c.replicas[0].dump(t)
	for _, r := range c.replicas[1:] {
		if d := r.dump(t); d != d0 {
			t.Fatalf("replica %d differs from replica 0", r.n)
		}
	}
}

func TestUnknownBatchVersionRefused(t *testing.T) {
	data, err := marshalOpts.Marshal(&rpc.CommandBatch{Version: rpc.BatchVersion + 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.DecodeBatch(data); !errors.Is(err, rpc.ErrUnknownVersion) {
		t.Fatalf("decode = %v", err)
	}
	db, err := bolt.Open(filepath.Join(t.TempDir(), "v.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var m machine
	err = db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucket(stateBucket)
		_, err := m.apply(b, []raftlog.Entry{{Index: 1, Term: 1, Data: data}})
		return err
	})
	if !errors.Is(err, rpc.ErrUnknownVersion) {
		t.Fatalf("apply = %v", err)
	}
}

// TestStateFormatRefusesOldLayout: state whose records sit under raw ids
// (written before recordKey, no format mark) is refused at Restore and at
// Apply instead of being misread; fresh and current state are accepted.
func TestStateFormatRefusesOldLayout(t *testing.T) {
	db := scratchDB(t)
	inv := newInvoke("svc", 1)
	entry := func(index uint64) []raftlog.Entry {
		data, err := rpc.EncodeBatch(invokeCmd(inv))
		if err != nil {
			t.Fatal(err)
		}
		return []raftlog.Entry{{Index: index, Term: 1, Data: data}}
	}
	var m machine
	err := db.Update(func(tx *bolt.Tx) error {
		fresh, err := tx.CreateBucket([]byte("fresh"))
		if err != nil {
			return err
		}
		if err := checkFormat(fresh); err != nil {
			t.Errorf("empty state: %v", err)
		}
		if _, err := m.apply(fresh, entry(1)); err != nil {
			t.Errorf("apply to empty state: %v", err)
		}
		if err := checkFormat(fresh); err != nil {
			t.Errorf("state written by this version: %v", err)
		}

		old, err := tx.CreateBucket([]byte("old"))
		if err != nil {
			return err
		}
		records, err := old.CreateBucket(invocationsBucket)
		if err != nil {
			return err
		}
		if err := records.Put(inv.InvocationId, []byte("record")); err != nil {
			return err
		}
		if err := checkFormat(old); !errors.Is(err, ErrStateFormat) {
			t.Errorf("old layout: checkFormat = %v, want ErrStateFormat", err)
		}
		if _, err := m.apply(old, entry(2)); !errors.Is(err, ErrStateFormat) {
			t.Errorf("old layout: apply = %v, want ErrStateFormat", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fuzzLog turns fuzz input into a log of well-formed commands over a few
// invocations, so that they meet: every 4 bytes are one command (kind,
// invocation, time, detail); a kind byte with its high bit set starts a
// new entry (of the next term when its next bit is set too). Invocations
// 0-2 are of a plain service, 3-5 of an object's two keys (exclusive or
// shared by the detail byte, so they queue behind each other).
func fuzzLog(t testing.TB, data []byte) []raftlog.Entry {
	const invocations, firstKeyed = 6, 3
	ids := make([][]byte, invocations)
	keys := make([]string, invocations)
	for i := range ids {
		var id invocation.ID
		binary.BigEndian.PutUint64(id[:8], uint64(i)<<56) // spread partition keys
		if i >= firstKeyed {
			keys[i] = fmt.Sprintf("k%d", i%2)
			binary.BigEndian.PutUint64(id[:8], invocation.KeyedPartitionKey("obj", keys[i]))
		}
		id[8] = byte(i) // distinct ids
		ids[i] = id.Bytes()
	}
	var entries []raftlog.Entry
	var cmds []*rpc.Command
	term := uint64(1)
	flush := func() {
		if len(cmds) == 0 {
			return
		}
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: term, Data: data})
		cmds = nil
	}
	for ; len(data) >= 4; data = data[4:] {
		n := int(data[1]) % invocations
		kind, id, at, detail := data[0], ids[n], int64(data[2])*10, data[3]
		if kind&0x80 != 0 {
			flush()
			if kind&0x40 != 0 {
				term++
			}
		}
		var cmd *rpc.Command
		switch kind % 7 {
		case 0, 1: // Invoke, with one of two request ids (a retry or another request)
			inv := &rpc.Invoke{InvocationId: id, RequestId: []byte{kind % 2}, Service: "svc", Handler: "h",
				Body: []byte{detail}, ProposedAtUnixMs: at, NotBeforeUnixMs: int64(detail%4) * 100}
			if keys[n] != "" {
				inv.Service, inv.Key, inv.Exclusive = "obj", keys[n], detail&0x10 == 0
			}
			cmd = invokeCmd(inv)
		case 2:
			cmd = completeCmd(&rpc.Complete{InvocationId: id, Result: &rpc.Result{Status: 200 + uint32(detail%3)*150, Body: []byte{detail}},
				ProposedAtUnixMs: at})
		case 3:
			cmd = attemptFailedCmd(&rpc.AttemptFailed{InvocationId: id, Attempt: uint32(detail % 4), Error: "e", RetryAtUnixMs: at + 50,
				ProposedAtUnixMs: at})
		case 4:
			cmd = cancelCmd(&rpc.Cancel{InvocationId: id, RequestId: []byte{detail}, ProposedAtUnixMs: at})
		case 5:
			cmd = purgeCmd(&rpc.Purge{BeforeUnixMs: at, ProposedAtUnixMs: at})
		case 6: // a delayed exclusive invocation enters its key
			cmd = admitCmd(&rpc.Admit{InvocationId: id, ProposedAtUnixMs: at})
		}
		cmds = append(cmds, cmd)
	}
	flush()
	return entries
}

// FuzzApply: Apply is a function of the log. The commands the input
// encodes (fuzzLog), applied on fresh state machines all in one call, one
// entry per call (by one machine, or by a new one each time, which has
// cached no record), or split anywhere, store the same bytes. The input taken
// as raw entry bytes never panics Apply: it applies or fails with an error
// (which stops the group).
func FuzzApply(f *testing.F) {
	entries, _ := mixedLog(f)
	for _, e := range entries[:4] {
		f.Add(e.Data)
	}
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x02})
	// Invoke, fail an attempt, cancel, retry the Invoke, new term:
	// complete, purge.
	f.Add([]byte{0, 1, 10, 0, 3, 1, 11, 1, 4, 1, 12, 7, 1, 1, 13, 0, 0xc2, 1, 14, 0, 5, 0, 99, 0})
	f.Add([]byte{0, 0, 1, 1, 0, 1, 2, 2, 0x82, 0, 3, 0, 0x83, 1, 4, 2, 0xc5, 0, 255, 0, 0, 0, 5, 3})
	// Three exclusive invocations of one key (one delayed, then admitted),
	// complete the running one, cancel a queued one, complete the next.
	f.Add([]byte{0, 3, 1, 0, 0, 5, 2, 1, 0x80, 3, 3, 0, 0x82, 3, 4, 0, 6, 5, 5, 0, 4, 5, 6, 1, 0xc2, 5, 7, 0})
	db := scratchDB(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		log := fuzzLog(t, data)
		// Each state machine gets a fresh bucket of a transaction that is
		// rolled back, so every input starts from nothing.
		scratchTx(t, db, func(fresh func(string) *bolt.Bucket) {
			var m machine
			_, _ = m.apply(fresh("raw"), []raftlog.Entry{{Index: 1, Term: 1, Data: data}})
			if len(log) == 0 {
				return
			}
			apply := func(b *bolt.Bucket, entries []raftlog.Entry) {
				if _, err := m.apply(b, entries); err != nil {
					t.Fatalf("apply: %v", err)
				}
			}
			all := fresh("all")
			apply(all, log)
			one := fresh("one")
			for _, e := range log {
				apply(one, []raftlog.Entry{e})
			}
			uncached := fresh("uncached") // a machine per entry: no record cached
			for _, e := range log {
				var restarted machine
				if _, err := restarted.apply(uncached, []raftlog.Entry{e}); err != nil {
					t.Fatalf("apply: %v", err)
				}
			}
			split := int(data[len(data)-1]) % len(log)
			parts := fresh("split")
			apply(parts, log[:split])
			apply(parts, log[split:])
			want := dumpBucket(t, all)
			if got := dumpBucket(t, one); got != want {
				t.Fatalf("one entry per Apply differs from all in one:\n%s\n---\n%s", got, want)
			}
			if got := dumpBucket(t, uncached); got != want {
				t.Fatalf("a machine per entry (no record cached) differs:\n%s\n---\n%s", got, want)
			}
			if got := dumpBucket(t, parts); got != want {
				t.Fatalf("split after entry %d differs:\n%s\n---\n%s", split, got, want)
			}
		})
	})
}

func dumpBucket(t testing.TB, b *bolt.Bucket) string {
	return dumpState(t, func(_ context.Context, fn func(*bolt.Bucket) error) error { return fn(b) })
}
