package partition

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// applyAll applies entries to a fresh bbolt file, in chunks of chunk
// entries per transaction, and returns its dump.
func applyAll(t testing.TB, entries []raftlog.Entry, chunk int) string {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "m.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
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
	r := &replica{db: db}
	return r.dump(t)
}

// mixedLog builds a log exercising every command, duplicates and stale
// reports included.
func mixedLog(t testing.TB) []raftlog.Entry {
	var entries []raftlog.Entry
	add := func(term uint64, cmds ...*rpc.Command) {
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: term, Data: data})
	}
	var ids [][]byte
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
	return entries
}

func TestReplicasFedTheSameLogStoreTheSameBytes(t *testing.T) {
	entries := mixedLog(t)
	a, b := applyAll(t, entries, 1), applyAll(t, entries, 7)
	if a != b {
		t.Fatalf("replicas differ:\n%s\n---\n%s", a, b)
	}
	if len(a) == 0 {
		t.Fatal("empty state")
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
	db, err := bolt.Open(filepath.Join(t.TempDir(), "f.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	inv := newInvoke("svc", 1)
	entry := func(index uint64) []raftlog.Entry {
		data, err := rpc.EncodeBatch(invokeCmd(inv))
		if err != nil {
			t.Fatal(err)
		}
		return []raftlog.Entry{{Index: index, Term: 1, Data: data}}
	}
	var m machine
	err = db.Update(func(tx *bolt.Tx) error {
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
