package partition

import (
	"context"
	"errors"
	"testing"

	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// A fence refuses, from its place in the log on, every invocation checked
// against an older registration of its service, and stores nothing for it;
// newer, unchecked and already accepted invocations, and other services, are
// not refused. A lower fence does not lower it.
func TestFenceRefusesOlderRegistrations(t *testing.T) {
	db := scratchDB(t)
	checked := func(service string, registered uint64) *rpc.Invoke {
		inv := newInvoke(service, int(registered))
		inv.ServiceRegisteredIndex = registered
		return inv
	}
	before := checked("S", 5)
	steps := []struct {
		what    string
		cmd     *rpc.Command
		refused bool
	}{
		{"checked against 5, before any fence", invokeCmd(before), false},
		{"fence at 10", fenceCmd(&rpc.FenceService{Name: "S", Index: 10, RequestId: []byte("f1")}), false},
		{"checked against 5, after the fence", invokeCmd(checked("S", 5)), true},
		{"checked against 10", invokeCmd(checked("S", 10)), false},
		{"not checked (an older ingress)", invokeCmd(checked("S", 0)), false},
		{"a lower fence", fenceCmd(&rpc.FenceService{Name: "S", Index: 7, RequestId: []byte("f2")}), false},
		{"checked against 8: the fence is still 10", invokeCmd(checked("S", 8)), true},
		{"a retry of the invocation accepted before the fence", invokeCmd(before), false},
		{"another service", invokeCmd(checked("T", 1)), false},
	}
	var m machine
	for i, s := range steps {
		data, err := rpc.EncodeBatch(s.cmd)
		if err != nil {
			t.Fatal(err)
		}
		var fx *effects
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(stateBucket)
			if err != nil {
				return err
			}
			fx, err = m.apply(b, []raftlog.Entry{{Index: uint64(i + 1), Term: 1, Data: data}})
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if len(fx.replies) != 1 {
			t.Fatalf("%s: %d replies, want 1", s.what, len(fx.replies))
		}
		if got := errors.Is(fx.replies[0].err, rpc.ErrStaleRegistry); got != s.refused {
			t.Fatalf("%s: reply error %v, refused = %v, want %v", s.what, fx.replies[0].err, got, s.refused)
		}
		if inv := s.cmd.GetInvoke(); inv != nil {
			var found bool
			if err := db.View(func(tx *bolt.Tx) error {
				_, found, err = getRecord(tx.Bucket(stateBucket), inv.InvocationId)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if found == s.refused {
				t.Fatalf("%s: stored = %v, refused = %v", s.what, found, s.refused)
			}
		}
	}
}

// A partition that never saw a fence has no fences bucket: its state is
// what it was before fences existed.
func TestNoFenceNoBucket(t *testing.T) {
	entries, _ := mixedLog(t)
	r := applyAll(t, entries, 7)
	if err := r.View(context.Background(), func(b *bolt.Bucket) error {
		if b.Bucket(fencesBucket) != nil {
			t.Fatal("fences bucket created without a fence")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
