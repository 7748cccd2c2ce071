package registry

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
)

// stateBucket stands for the group's state bucket raftlog hands to Apply.
var stateBucket = []byte("state")

// metaLog is a single-node metadata group that applies each proposal
// synchronously before Propose returns (the entry-before-reply race).
type metaLog struct {
	mu     sync.Mutex
	db     *bolt.DB
	sm     raftlog.StateMachine
	index  uint64
	term   uint64
	leader bool
	hold   bool // append without applying
	// catchUp, when set, is what CatchUp waits for (nil: it returns at
	// once); catchUps counts the calls.
	catchUp  chan struct{}
	catchUps int
}

func (l *metaLog) Propose(ctx context.Context, data []byte) (raftlog.Proposal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leader {
		return raftlog.Proposal{}, &raftlog.NotLeaderError{Leader: 2, Term: l.term}
	}
	l.index++
	if l.hold {
		return raftlog.Proposal{Index: l.index, Term: l.term}, nil
	}
	var fx raftlog.Applied
	err := l.db.Update(func(tx *bolt.Tx) error {
		var err error
		fx, err = l.sm.Apply(tx.Bucket(stateBucket), []raftlog.Entry{{Index: l.index, Term: l.term, Data: data}})
		return err
	})
	if err != nil {
		return raftlog.Proposal{}, err
	}
	fx.Reveal()
	return raftlog.Proposal{Index: l.index, Term: l.term}, nil
}

func (l *metaLog) CatchUp(ctx context.Context) error {
	l.mu.Lock()
	l.catchUps++
	ch := l.catchUp
	l.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (l *metaLog) Status() raftlog.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := raftlog.Status{Group: raftlog.MetaGroup, Term: l.term, IsLeader: l.leader, Leader: 2}
	if l.leader {
		st.Leader = 1
	}
	return st
}

// newMetaDB is a bbolt file with the state bucket, closed at cleanup.
func newMetaDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "meta.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(stateBucket); return err }); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestRegistry(t *testing.T) {
	db := newMetaDB(t)
	reg := NewRegistry(zerolog.Nop())
	log := &metaLog{db: db, sm: reg, term: 1, leader: true}
	reg.Start(log)
	ctx := context.Background()
	for _, name := range []string{"zeta", "alpha"} {
		if err := reg.Put(ctx, &rpc.Service{Name: name, Url: "http://127.0.0.1:9/" + name}); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Put(ctx, &rpc.Service{Name: "bad", Url: "ftp://x"}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("bad url = %v", err)
	}
	if svc, ok := reg.Lookup("alpha"); !ok || svc.Url != "http://127.0.0.1:9/alpha" || svc.UpdatedAtUnixMs == 0 {
		t.Fatalf("lookup = %v %v", svc, ok)
	}
	// A stamp from the node that took the request is kept: it answered with it.
	if err := reg.Put(ctx, &rpc.Service{Name: "stamped", Url: "http://127.0.0.1:9/", UpdatedAtUnixMs: 1_700_000_000_123}); err != nil {
		t.Fatal(err)
	}
	if svc, _ := reg.Lookup("stamped"); svc.GetUpdatedAtUnixMs() != 1_700_000_000_123 {
		t.Fatalf("stamp %d, want the caller's", svc.GetUpdatedAtUnixMs())
	}
	if err := reg.Delete(ctx, "stamped"); err != nil {
		t.Fatal(err)
	}
	if l := reg.List(); len(l) != 2 || l[0].Name != "alpha" || l[1].Name != "zeta" {
		t.Fatalf("list = %v", l)
	}
	if err := reg.Delete(ctx, "zeta"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Delete(ctx, "zeta"); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	if _, ok := reg.Lookup("zeta"); ok {
		t.Fatal("deleted service still found")
	}
	// A fresh registry restores from the bucket.
	again := NewRegistry(zerolog.Nop())
	if err := db.View(func(tx *bolt.Tx) error { return again.Restore(tx.Bucket(stateBucket)) }); err != nil {
		t.Fatal(err)
	}
	if l := again.List(); len(l) != 1 || l[0].Name != "alpha" {
		t.Fatalf("restored list = %v", l)
	}
	// A pending Put fails when leadership is lost.
	log.mu.Lock()
	log.hold = true
	log.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- reg.Put(ctx, &rpc.Service{Name: "pending", Url: "http://127.0.0.1:9"}) }()
	waitFor(t, 5*time.Second, "put pending", func() bool {
		reg.wmu.Lock()
		defer reg.wmu.Unlock()
		return len(reg.waiters) == 1
	})
	reg.OnLeadership(raftlog.LeaderEvent{Group: raftlog.MetaGroup, Leader: 2, Term: 2})
	if err := <-errc; !errors.Is(err, rpc.ErrLostLeadership) {
		t.Fatalf("pending put on step-down = %v", err)
	}
	log.mu.Lock()
	log.leader = false
	log.mu.Unlock()
	var nl *rpc.NotLeaderError
	if err := reg.Put(ctx, &rpc.Service{Name: "x", Url: "http://127.0.0.1:9"}); !errors.As(err, &nl) || nl.Leader != 2 {
		t.Fatalf("follower put = %v", err)
	}
}

// TestLookupFreshCatchesUpOnAMiss: a miss first lets the replica catch up
// with the leader (bounded), and a registration applied by then is found;
// hits never ask. A miss is "not found" only after a catch-up that worked:
// one that timed out is "cannot tell".
func TestLookupFreshCatchesUpOnAMiss(t *testing.T) {
	db := newMetaDB(t)
	reg := NewRegistry(zerolog.Nop())
	log := &metaLog{db: db, sm: reg, term: 1, catchUp: make(chan struct{})}
	reg.Start(log)
	catchUps := func() int {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.catchUps
	}

	// The leader never answers: the miss is answered after the bound.
	start := time.Now()
	if _, err := reg.LookupFresh("echo", 50*time.Millisecond); !errors.Is(err, ErrRegistryUnavailable) || errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("miss without a catch-up: %v, want ErrRegistryUnavailable", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond || catchUps() != 1 {
		t.Fatalf("miss answered after %v with %d catch-ups; want one catch-up bounded by 50ms", waited, catchUps())
	}

	found := make(chan bool, 1)
	go func() {
		_, err := reg.LookupFresh("echo", time.Minute)
		found <- err == nil
	}()
	waitFor(t, 5*time.Second, "LookupFresh to catch up", func() bool { return catchUps() == 2 })
	// Meanwhile the registration applies on this replica; then the
	// catch-up completes.
	data, err := rpc.EncodeBatch(&rpc.Command{Cmd: &rpc.Command_PutService{PutService: &rpc.PutService{
		Service: &rpc.Service{Name: "echo", Url: "http://127.0.0.1:9"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var fx raftlog.Applied
	if err := db.Update(func(tx *bolt.Tx) error {
		var err error
		fx, err = reg.Apply(tx.Bucket(stateBucket), []raftlog.Entry{{Index: 7, Term: 1, Data: data}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fx.Reveal()
	close(log.catchUp)
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("registration applied during the catch-up, but LookupFresh missed it")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LookupFresh still waiting 10s after its catch-up completed")
	}
	if _, err := reg.LookupFresh("echo", time.Minute); err != nil || catchUps() != 2 {
		t.Fatalf("hit: %v after %d catch-ups; a hit must not catch up", err, catchUps())
	}
	if _, err := reg.LookupFresh("nope", time.Minute); !errors.Is(err, rpc.ErrNotFound) || catchUps() != 3 {
		t.Fatalf("miss after a catch-up that worked: %v (%d catch-ups), want rpc.ErrNotFound", err, catchUps())
	}
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval of a condition, not synchronisation
	}
}
