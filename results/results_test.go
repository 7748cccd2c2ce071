package results

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

func id(n byte) []byte { return bytes.Repeat([]byte{n}, 24) }

func TestPutGetPurge(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "r.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("p"))
		if err != nil {
			return err
		}
		if err := Init(b); err != nil {
			return err
		}
		for i, at := range []int64{300, 100, 200, 100} {
			r := &rpc.InvocationResult{InvocationId: id(byte(i)), CompletedAtUnixMs: at, Result: &rpc.Result{Status: 200}}
			if err := Put(b, r); err != nil {
				return err
			}
		}
		if at, ok := Oldest(b); !ok || at != 100 {
			t.Fatalf("oldest = %d %v", at, ok)
		}
		var purged [][]byte
		n, err := Purge(b, 200, 0, func(id []byte) error { purged = append(purged, append([]byte(nil), id...)); return nil })
		if err != nil {
			return err
		}
		if n != 2 || len(purged) != 2 || !bytes.Equal(purged[0], id(1)) || !bytes.Equal(purged[1], id(3)) {
			t.Fatalf("purged %d %x", n, purged)
		}
		for i, want := range []bool{true, false, true, false} {
			if _, ok, err := Get(b, []int64{300, 100, 200, 100}[i], id(byte(i))); err != nil || ok != want {
				t.Fatalf("get %d = %v %v, want %v", i, ok, err, want)
			}
		}
		if at, ok := Oldest(b); !ok || at != 200 {
			t.Fatalf("oldest after purge = %d %v", at, ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A limited Purge deletes at most limit results, oldest first, and the
// next one carries on where it stopped.
func TestPurgeLimit(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "r.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("p"))
		if err != nil {
			return err
		}
		if err := Init(b); err != nil {
			return err
		}
		if _, ok := Newest(b); ok {
			t.Fatal("newest of nothing found")
		}
		for i := range 10 {
			r := &rpc.InvocationResult{InvocationId: id(byte(i)), CompletedAtUnixMs: int64(100 + 10*i), Result: &rpc.Result{Status: 200}}
			if err := Put(b, r); err != nil {
				return err
			}
		}
		if at, ok := Newest(b); !ok || at != 190 {
			t.Fatalf("newest = %d %v", at, ok)
		}
		// Seven have expired (100..160); three per purge.
		for _, want := range []int{3, 3, 1, 0} {
			var purged []byte
			n, err := Purge(b, 170, 3, func(id []byte) error { purged = append(purged, id[0]); return nil })
			if err != nil {
				return err
			}
			if n != want || len(purged) != want {
				t.Fatalf("purged %d (%v), want %d", n, purged, want)
			}
		}
		if at, ok := Oldest(b); !ok || at != 170 {
			t.Fatalf("oldest after purges = %d %v", at, ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWaiters(t *testing.T) {
	w := NewWaiters(2)
	a, err := w.Add(id(1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Add(id(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add(id(3)); !errors.Is(err, rpc.ErrOverloaded) {
		t.Fatalf("third waiter: %v", err)
	}
	w.Complete(&rpc.InvocationResult{InvocationId: id(1)})
	if r, err := w.Wait(context.Background(), a); err != nil || !bytes.Equal(r.InvocationId, id(1)) {
		t.Fatalf("wait a = %v %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := w.Wait(ctx, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait b = %v", err)
	}
	if w.Len() != 0 {
		t.Fatalf("len %d after ctx end", w.Len())
	}
	c, _ := w.Add(id(4))
	w.FailAll(rpc.ErrLostLeadership)
	if _, err := w.Wait(context.Background(), c); !errors.Is(err, rpc.ErrLostLeadership) {
		t.Fatalf("wait c = %v", err)
	}
}
