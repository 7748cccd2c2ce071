package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/rpc"
)

// TestRulesCompareAndSwap: every change names the version it replaces; a
// stale one is refused with rpc.ErrConflict and changes nothing.
func TestRulesCompareAndSwap(t *testing.T) {
	db := newMetaDB(t)
	reg := New(zerolog.Nop())
	reg.Start(&metaLog{db: db, sm: reg, term: 1, leader: true})
	ctx := context.Background()

	r1, err := reg.PutRule(ctx, &rpc.Rule{Pattern: "checkout", Concurrency: 50, Enabled: true}, 0)
	if err != nil || r1.Version != 1 || r1.UpdatedAtUnixMs == 0 {
		t.Fatalf("create = %v, %v; want version 1, stamped", r1, err)
	}
	// Creating it again (expected 0) is a conflict: it exists.
	if _, err := reg.PutRule(ctx, &rpc.Rule{Pattern: "checkout", Concurrency: 7, Enabled: true}, 0); !errors.Is(err, rpc.ErrConflict) {
		t.Fatalf("second create = %v, want ErrConflict", err)
	}
	r2, err := reg.PutRule(ctx, &rpc.Rule{Pattern: "checkout", Concurrency: 20, Enabled: true}, 1)
	if err != nil || r2.Version != 2 || r2.Concurrency != 20 {
		t.Fatalf("update at 1 = %v, %v", r2, err)
	}
	// Two operators read version 1; the second write is refused.
	if _, err := reg.PutRule(ctx, &rpc.Rule{Pattern: "checkout", Concurrency: 99, Enabled: true}, 1); !errors.Is(err, rpc.ErrConflict) {
		t.Fatalf("stale update = %v, want ErrConflict", err)
	}
	if got, _ := reg.Rule("checkout"); got.Concurrency != 20 || got.Version != 2 {
		t.Fatalf("after a refused update: %v", got)
	}
	if err := reg.DeleteRule(ctx, "checkout", 1); !errors.Is(err, rpc.ErrConflict) {
		t.Fatalf("stale delete = %v, want ErrConflict", err)
	}
	if err := reg.DeleteRule(ctx, "checkout", 2); err != nil {
		t.Fatal(err)
	}
	if err := reg.DeleteRule(ctx, "checkout", 0); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("delete of a deleted rule = %v, want ErrNotFound", err)
	}
	for _, bad := range []*rpc.Rule{{Pattern: "", Concurrency: 1}, {Pattern: "a/b", Concurrency: 1}, {Pattern: "x", Concurrency: 0}, {Pattern: "**", Concurrency: 1}} {
		if _, err := reg.PutRule(ctx, bad, 0); !errors.Is(err, rpc.ErrInvalid) {
			t.Errorf("PutRule(%v) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestRuleForExactOverAny: a scope's own rule wins over "*"; a disabled
// rule applies to nothing; rules survive a restore from the bucket.
func TestRuleForExactOverAny(t *testing.T) {
	db := newMetaDB(t)
	reg := New(zerolog.Nop())
	reg.Start(&metaLog{db: db, sm: reg, term: 1, leader: true})
	ctx := context.Background()
	if _, err := reg.PutRule(ctx, &rpc.Rule{Pattern: AnyScope, Concurrency: 10, Enabled: true}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.PutRule(ctx, &rpc.Rule{Pattern: "checkout", Concurrency: 2, Enabled: true}, 0); err != nil {
		t.Fatal(err)
	}
	check := func(reg *Registry, scope string, want uint32) {
		t.Helper()
		rule, ok := reg.RuleFor(scope)
		if got := rule.GetConcurrency(); got != want || ok != (want != 0) {
			t.Fatalf("RuleFor(%q) = %d (%v), want %d", scope, got, ok, want)
		}
	}
	check(reg, "checkout", 2)
	check(reg, "search", 10)
	check(reg, "", 0) // no scope: no scope rule

	// Disabling the exact rule lets "*" apply to its scope.
	if _, err := reg.PutRule(ctx, &rpc.Rule{Pattern: "checkout", Concurrency: 2, Enabled: false}, 1); err != nil {
		t.Fatal(err)
	}
	check(reg, "checkout", 10)

	restored := New(zerolog.Nop())
	if err := db.View(func(tx *bolt.Tx) error { return restored.Restore(tx.Bucket(stateBucket)) }); err != nil {
		t.Fatal(err)
	}
	if l := restored.Rules(); len(l) != 2 || l[0].Pattern != AnyScope || l[1].Pattern != "checkout" || l[1].Version != 2 {
		t.Fatalf("restored rules = %v", l)
	}
	check(restored, "checkout", 10)
}
