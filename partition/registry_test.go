package partition

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
	// committed and applied are what Status reports; statusCalls counts
	// the calls.
	committed, applied uint64
	statusCalls        int
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

func (l *metaLog) ReadIndex(context.Context) error { return nil }
func (l *metaLog) View(fn func(b *bolt.Bucket) error) error {
	return l.db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(stateBucket)) })
}
func (l *metaLog) Status() raftlog.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.statusCalls++
	st := raftlog.Status{Group: raftlog.MetaGroup, Term: l.term, IsLeader: l.leader, Leader: 2,
		Committed: l.committed, Applied: l.applied}
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

// TestLookupFreshWaitsForCommittedRegistration: a replica that knows of a
// committed registry change it has not applied yet answers a miss only
// after applying it (or after the bound).
func TestLookupFreshWaitsForCommittedRegistration(t *testing.T) {
	db := newMetaDB(t)
	reg := NewRegistry(zerolog.Nop())
	log := &metaLog{db: db, sm: reg, term: 1, committed: 7, applied: 6}
	reg.Start(log)

	// Nothing arrives: the miss is answered after the bound.
	start := time.Now()
	if _, ok := reg.LookupFresh("echo", 50*time.Millisecond); ok {
		t.Fatal("found a service that was never registered")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("answered the miss after %v, before the 50ms bound, though entry 7 was not applied", waited)
	}

	log.mu.Lock()
	calls := log.statusCalls
	log.mu.Unlock()
	found := make(chan bool, 1)
	go func() {
		_, ok := reg.LookupFresh("echo", time.Minute)
		found <- ok
	}()
	// Once it re-reads the status it is waiting (its first read took the
	// target).
	waitFor(t, 5*time.Second, "LookupFresh to wait for entry 7", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.statusCalls >= calls+2
	})
	// Entry 7 registers echo; it applies (and the replica publishes its
	// applied index) while the lookup waits.
	data, err := EncodeBatch(&rpc.Command{Cmd: &rpc.Command_PutService{PutService: &rpc.PutService{
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
	log.mu.Lock()
	log.applied = 7
	log.mu.Unlock()
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("registration applied while waiting, but LookupFresh missed it")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LookupFresh still waiting 10s after the registration applied")
	}

	// Caught up: a miss is answered at once.
	start = time.Now()
	if _, ok := reg.LookupFresh("other", time.Minute); ok || time.Since(start) > 5*time.Second {
		t.Fatalf("miss on a caught-up replica: found=%v after %v", ok, time.Since(start))
	}
}
