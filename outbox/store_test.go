package outbox

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func withBucket(t *testing.T, fn func(b *bolt.Bucket)) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "o.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("p"))
		if err != nil {
			return err
		}
		if err := Init(b); err != nil {
			return err
		}
		fn(b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func id(n byte) []byte { return bytes.Repeat([]byte{n}, 24) }

func TestQueueOrderRescheduleRemove(t *testing.T) {
	withBucket(t, func(b *bolt.Bucket) {
		for _, e := range []Entry{{ID: id(3), Due: 10, Service: "s"}, {ID: id(1), Due: 20}, {ID: id(2), Due: 10}, {ID: id(4), Due: -5}} {
			if err := Put(b, e); err != nil {
				t.Fatal(err)
			}
		}
		// Reschedule id(4) behind everything with attempts recorded.
		if moved, err := Move(b, -5, Entry{ID: id(4), Due: 30, Attempts: 2, Service: "x"}); err != nil || !moved {
			t.Fatal(moved, err)
		}
		var got []byte
		if err := Scan(b, func(e Entry) bool { got = append(got, e.ID[0]); return true }); err != nil {
			t.Fatal(err)
		}
		if want := []byte{2, 3, 1, 4}; !bytes.Equal(got, want) {
			t.Fatalf("order %v, want %v", got, want)
		}
		if e, ok, err := Get(b, 30, id(4)); err != nil || !ok || e.Due != 30 || e.Attempts != 2 || e.Service != "x" {
			t.Fatalf("get = %+v %v %v", e, ok, err)
		}
		if Count(b) != 4 {
			t.Fatalf("count %d", Count(b))
		}
		if ok, err := Remove(b, 10, id(3)); err != nil || !ok {
			t.Fatalf("remove = %v %v", ok, err)
		}
		if ok, _ := Remove(b, 10, id(3)); ok {
			t.Fatal("second remove reported a queued entry")
		}
		if _, ok, _ := Get(b, 10, id(3)); ok {
			t.Fatal("removed entry still found")
		}
		if Count(b) != 3 {
			t.Fatalf("count %d", Count(b))
		}
	})
}

func TestRemoveAbsent(t *testing.T) {
	withBucket(t, func(b *bolt.Bucket) {
		if ok, err := Remove(b, 10, id(1)); err != nil || ok {
			t.Fatalf("remove from an empty queue = %v %v", ok, err)
		}
		if err := Put(b, Entry{ID: id(2), Due: 10}); err != nil {
			t.Fatal(err)
		}
		for _, due := range []int64{5, 10, 20} { // before, beside and past the one entry
			if ok, err := Remove(b, due, id(1)); err != nil || ok {
				t.Fatalf("remove of an absent entry due %d = %v %v", due, ok, err)
			}
		}
		if Count(b) != 1 {
			t.Fatalf("count %d, want the entry kept", Count(b))
		}
	})
}

// ScanQueued reads what Scan reads, in place; Entry copies it.
func TestScanQueued(t *testing.T) {
	withBucket(t, func(b *bolt.Bucket) {
		want := []Entry{{ID: id(1), Due: 10, Attempts: 1, Service: "a"}, {ID: id(2), Due: 20, Service: "bb"}}
		for _, e := range want {
			if err := Put(b, e); err != nil {
				t.Fatal(err)
			}
		}
		var got []Entry
		if err := ScanQueued(b, func(q Queued) bool { got = append(got, q.Entry()); return true }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("scanned %v, want %v", got, want)
		}
		for i := range want {
			if !bytes.Equal(got[i].ID, want[i].ID) || got[i].Due != want[i].Due || got[i].Attempts != want[i].Attempts || got[i].Service != want[i].Service {
				t.Fatalf("entry %d = %+v, want %+v", i, got[i], want[i])
			}
		}
		// The copies are the caller's: the queue changing under them
		// changes nothing.
		if _, err := Remove(b, 10, id(1)); err != nil {
			t.Fatal(err)
		}
		if err := Put(b, Entry{ID: id(3), Due: 5, Service: "zz"}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[0].ID, id(1)) || got[0].Service != "a" {
			t.Fatalf("copied entry changed: %+v", got[0])
		}
	})
}

func TestClassify(t *testing.T) {
	for status, want := range map[int]Outcome{200: Success, 204: Success, 400: Terminal, 404: Terminal, 408: Retry, 429: Retry, 500: Retry, 503: Retry, 302: Terminal} {
		if got := Classify(status); got != want {
			t.Errorf("Classify(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestDelay(t *testing.T) {
	p := Policy{MaxAttempts: 5, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, MaxRetryAfter: 10 * time.Second}
	rnd := rand.New(rand.NewPCG(1, 2))
	for attempt, base := range map[uint32]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 9: time.Second} {
		for range 50 {
			d := p.Delay(attempt, 0, rnd)
			if d < base/2 || d > base {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, base/2, base)
			}
		}
	}
	if d := p.Delay(1, 3*time.Second, rnd); d != 3*time.Second {
		t.Fatalf("Retry-After not honoured: %v", d)
	}
	if d := p.Delay(1, time.Hour, rnd); d != 10*time.Second {
		t.Fatalf("Retry-After not capped: %v", d)
	}
	if !p.Exhausted(5) || p.Exhausted(4) {
		t.Fatal("Exhausted wrong")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if d, ok := ParseRetryAfter("7", now); !ok || d != 7*time.Second {
		t.Fatalf("seconds: %v %v", d, ok)
	}
	if d, ok := ParseRetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now); !ok || d != 90*time.Second {
		t.Fatalf("date: %v %v", d, ok)
	}
	for _, bad := range []string{"", "soon", "-3"} {
		if _, ok := ParseRetryAfter(bad, now); ok {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// A started mark is kept beside the service name and dropped by Move.
func TestMarkStarted(t *testing.T) {
	withBucket(t, func(b *bolt.Bucket) {
		if err := Put(b, Entry{ID: id(1), Due: 10, Attempts: 2, Service: "svc"}); err != nil {
			t.Fatal(err)
		}
		if ok, err := MarkStarted(b, 10, id(9), 99); err != nil || ok {
			t.Fatalf("mark of an absent entry = %v %v", ok, err)
		}
		if ok, err := MarkStarted(b, 10, id(1), 5000); err != nil || !ok {
			t.Fatalf("mark = %v %v", ok, err)
		}
		e, ok, err := Get(b, 10, id(1))
		if err != nil || !ok || e.StartedUntil != 5000 || e.Service != "svc" || e.Attempts != 2 {
			t.Fatalf("marked entry = %+v %v %v", e, ok, err)
		}
		if _, err := Move(b, 10, Entry{ID: id(1), Due: 20, Attempts: 3, Service: "svc"}); err != nil {
			t.Fatal(err)
		}
		if e, _, _ := Get(b, 20, id(1)); e.StartedUntil != 0 || e.Service != "svc" {
			t.Fatalf("moved entry = %+v, want the mark dropped", e)
		}
	})
}
