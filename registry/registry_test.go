package registry

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
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
	hold   bool     // append without applying
	held   [][]byte // what was appended while holding
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
		l.held = append(l.held, data)
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
	reg := New(zerolog.Nop())
	log := &metaLog{db: db, sm: reg, term: 1, leader: true}
	reg.Start(log)
	ctx := context.Background()
	for _, name := range []string{"zeta", "alpha"} {
		if _, err := reg.Put(ctx, &rpc.Service{Name: name, Url: "http://127.0.0.1:9/" + name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.Put(ctx, &rpc.Service{Name: "bad", Url: "ftp://x"}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("bad url = %v", err)
	}
	if svc, ok := reg.Lookup("alpha"); !ok || svc.Url != "http://127.0.0.1:9/alpha" || svc.UpdatedAtUnixMs == 0 {
		t.Fatalf("lookup = %v %v", svc, ok)
	}
	// A stamp from the node that took the request is kept: it answered with it.
	if _, err := reg.Put(ctx, &rpc.Service{Name: "stamped", Url: "http://127.0.0.1:9/", UpdatedAtUnixMs: 1_700_000_000_123}); err != nil {
		t.Fatal(err)
	}
	if svc, _ := reg.Lookup("stamped"); svc.GetUpdatedAtUnixMs() != 1_700_000_000_123 {
		t.Fatalf("stamp %d, want the caller's", svc.GetUpdatedAtUnixMs())
	}
	// Each change answers with its entry's index, and a registration
	// carries the index it was applied at.
	putAt, err := reg.Put(ctx, &rpc.Service{Name: "stamped", Url: "http://127.0.0.1:9/v2"})
	if err != nil {
		t.Fatal(err)
	}
	if svc, _ := reg.Lookup("stamped"); putAt == 0 || svc.GetRegisteredIndex() != putAt {
		t.Fatalf("put answered index %d, registration carries %d", putAt, svc.GetRegisteredIndex())
	}
	deletedAt, err := reg.Delete(ctx, "stamped")
	if err != nil {
		t.Fatal(err)
	}
	if deletedAt <= putAt {
		t.Fatalf("delete applied at %d, not after the put at %d", deletedAt, putAt)
	}
	if l := reg.List(); len(l) != 2 || l[0].Name != "alpha" || l[1].Name != "zeta" {
		t.Fatalf("list = %v", l)
	}
	if _, err := reg.Delete(ctx, "zeta"); err != nil {
		t.Fatal(err)
	}
	if at, err := reg.Delete(ctx, "zeta"); !errors.Is(err, rpc.ErrNotFound) || at <= deletedAt {
		t.Fatalf("second delete = %d, %v; want rpc.ErrNotFound at an index past %d", at, err, deletedAt)
	}
	if _, ok := reg.Lookup("zeta"); ok {
		t.Fatal("deleted service still found")
	}
	// A fresh registry restores from the bucket.
	again := New(zerolog.Nop())
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
	go func() { _, err := reg.Put(ctx, &rpc.Service{Name: "pending", Url: "http://127.0.0.1:9"}); errc <- err }()
	testutil.WaitFor(t, 5*time.Second, "put pending", func() bool {
		return reg.tracker.Len() == 1
	})
	reg.OnLeadership(raftlog.LeaderEvent{Group: raftlog.MetaGroup, Leader: 2, Term: 2})
	if err := <-errc; !errors.Is(err, rpc.ErrLostLeadership) {
		t.Fatalf("pending put on step-down = %v", err)
	}
	log.mu.Lock()
	log.leader = false
	log.mu.Unlock()
	var nl *rpc.NotLeaderError
	if _, err := reg.Put(ctx, &rpc.Service{Name: "x", Url: "http://127.0.0.1:9"}); !errors.As(err, &nl) || nl.Leader != 2 {
		t.Fatalf("follower put = %v", err)
	}
}

// TestPutAnsweredOnlyByItsOwnEntry: a pending Put is answered by the entry
// that carries its request id in the term it was proposed in, not by
// another node's registration, nor by its own command in another term.
func TestPutAnsweredOnlyByItsOwnEntry(t *testing.T) {
	db := newMetaDB(t)
	reg := New(zerolog.Nop())
	log := &metaLog{db: db, sm: reg, term: 3, leader: true, hold: true}
	reg.Start(log)
	errc := make(chan error, 1)
	go func() { _, err := reg.Put(ctxT(t), &rpc.Service{Name: "mine", Url: "http://127.0.0.1:9"}); errc <- err }()
	testutil.WaitFor(t, 5*time.Second, "put proposed", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.held) == 1
	})
	apply := func(term uint64, data []byte) {
		t.Helper()
		var fx raftlog.Applied
		if err := db.Update(func(tx *bolt.Tx) error {
			var err error
			fx, err = reg.Apply(tx.Bucket(stateBucket), []raftlog.Entry{{Index: 1, Term: term, Data: data}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		fx.Reveal()
	}
	stillPending := func(after string) {
		t.Helper()
		// The tracker hands a reply over synchronously in Reveal.
		if reg.tracker.Len() != 1 {
			t.Fatalf("Put answered by %s", after)
		}
	}
	other, err := rpc.EncodeBatch(&rpc.Command{Cmd: &rpc.Command_PutService{PutService: &rpc.PutService{
		Service: &rpc.Service{Name: "other", Url: "http://127.0.0.1:9"}, RequestId: []byte("another node's")}}})
	if err != nil {
		t.Fatal(err)
	}
	apply(3, other)
	stillPending("another registration")
	log.mu.Lock()
	mine := log.held[0]
	log.mu.Unlock()
	apply(2, mine)
	stillPending("its command in another term")
	apply(3, mine)
	if err := <-errc; err != nil {
		t.Fatalf("Put = %v", err)
	}
	if _, ok := reg.Lookup("mine"); !ok {
		t.Fatal("answered Put not visible to Lookup")
	}
}

// TestLookupCurrentCatchesUpFirst: every lookup first lets the replica
// catch up with the leader (bounded), so a registration applied by then is
// found, and a hit or a miss is only answered after a catch-up that
// worked: one that timed out is "cannot tell", even for a name this
// replica holds (it may have been removed since). A lost round is tried
// again within the wait.
func TestLookupCurrentCatchesUpFirst(t *testing.T) {
	db := newMetaDB(t)
	reg := New(zerolog.Nop())
	log := &metaLog{db: db, sm: reg, term: 1, catchUp: make(chan struct{})}
	reg.Start(log)
	catchUps := func() int {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.catchUps
	}

	// The leader never answers: the miss is answered after the bound.
	start := time.Now()
	if _, err := reg.LookupCurrent(ctxFor(t, 50*time.Millisecond), "echo"); !errors.Is(err, ErrUnavailable) || errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("miss without a catch-up: %v, want ErrUnavailable", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond || catchUps() != 1 {
		t.Fatalf("miss answered after %v with %d catch-ups; want one catch-up bounded by 50ms", waited, catchUps())
	}

	found := make(chan bool, 1)
	go func() {
		_, err := reg.LookupCurrent(ctxFor(t, time.Minute), "echo")
		found <- err == nil
	}()
	testutil.WaitFor(t, 5*time.Second, "LookupCurrent to catch up", func() bool { return catchUps() >= 2 })
	// Meanwhile the registration applies on this replica.
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
	// A hit waits for its catch-up too.
	if _, err := reg.LookupCurrent(ctxFor(t, 50*time.Millisecond), "echo"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("hit without a catch-up: %v, want ErrUnavailable", err)
	}
	close(log.catchUp)
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("registration applied during the catch-up, but LookupCurrent missed it")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LookupCurrent still waiting 10s after its catch-up completed")
	}
	// A round that gathered the abandoned hit's caller may still run: count
	// from when none does.
	testutil.WaitFor(t, 5*time.Second, "catch-up rounds to end", func() bool {
		reg.catchUps.mu.Lock()
		defer reg.catchUps.mu.Unlock()
		return !reg.catchUps.running
	})
	rounds := catchUps()
	if _, err := reg.LookupCurrent(ctxFor(t, time.Minute), "echo"); err != nil || catchUps() != rounds+1 {
		t.Fatalf("hit: %v after %d catch-ups; want found after its own catch-up", err, catchUps()-rounds)
	}
	if _, err := reg.LookupCurrent(ctxFor(t, time.Minute), "nope"); !errors.Is(err, rpc.ErrNotFound) || catchUps() != rounds+2 {
		t.Fatalf("miss after a catch-up that worked: %v (%d catch-ups), want rpc.ErrNotFound", err, catchUps()-rounds)
	}
}

// ctxT is a context bounded by the test's deadline (or a minute).
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ctxFor is a context that ends after d (or with the test).
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCloseEndsCatchUpRounds: Close ends the catch-up round that is
// running (its goroutine is the registry's, and Close waits for it), fails
// its caller and every later CatchUp with ErrUnavailable, and fails a
// pending Put with ErrLostLeadership.
func TestCloseEndsCatchUpRounds(t *testing.T) {
	db := newMetaDB(t)
	reg := New(zerolog.Nop())
	log := &metaLog{db: db, sm: reg, term: 1, leader: true, hold: true, catchUp: make(chan struct{})}
	reg.Start(log)
	catchUp := make(chan error, 1)
	go func() { catchUp <- reg.CatchUp(context.Background()) }()
	put := make(chan error, 1)
	go func() {
		_, err := reg.Put(context.Background(), &rpc.Service{Name: "echo", Url: "http://127.0.0.1:9"})
		put <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "a catch-up round and a Put under way", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.catchUps > 0 && len(log.held) == 1
	})
	reg.Close()
	for _, c := range []struct {
		name string
		got  chan error
		want error
	}{{"CatchUp", catchUp, ErrUnavailable}, {"Put", put, rpc.ErrLostLeadership}} {
		select {
		case err := <-c.got:
			if !errors.Is(err, c.want) {
				t.Fatalf("%s after Close = %v, want %v", c.name, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waiting 10s after Close", c.name)
		}
	}
	if err := reg.CatchUp(context.Background()); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errClosed) {
		t.Fatalf("CatchUp after Close = %v, want ErrUnavailable (closed)", err)
	}
}
