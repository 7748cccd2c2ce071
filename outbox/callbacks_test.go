package outbox

import (
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestCallbackQueue(t *testing.T) {
	withBucket(t, func(b *bolt.Bucket) {
		if err := ScanCallbacks(b, func(Entry) bool { t.Fatal("entry in a queue never written"); return false }); err != nil {
			t.Fatal(err)
		}
		if removed, err := RemoveCallback(b, 1, []byte("a")); removed || err != nil {
			t.Fatalf("RemoveCallback on no queue = %v, %v", removed, err)
		}
		for _, e := range []Entry{{ID: []byte("b"), Due: 20}, {ID: []byte("a"), Due: 30, Attempts: 2}, {ID: []byte("c"), Due: 10}} {
			if err := PutCallback(b, e); err != nil {
				t.Fatal(err)
			}
		}
		// Deliveries and callbacks are separate queues.
		if n := Count(b); n != 0 {
			t.Fatalf("callbacks counted as deliveries: %d", n)
		}
		if removed, err := RemoveCallback(b, 21, []byte("b")); removed || err != nil {
			t.Fatalf("RemoveCallback at the wrong due = %v, %v", removed, err)
		}
		if removed, err := RemoveCallback(b, 20, []byte("b")); !removed || err != nil {
			t.Fatalf("RemoveCallback = %v, %v", removed, err)
		}
		var got []Entry
		if err := ScanCallbacks(b, func(e Entry) bool { got = append(got, e); return true }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || string(got[0].ID) != "c" || got[0].Due != 10 || string(got[1].ID) != "a" || got[1].Attempts != 2 {
			t.Fatalf("scan = %+v", got)
		}
	})
}
