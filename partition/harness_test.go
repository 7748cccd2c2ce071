package partition

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
)

// fakeCluster is a Raft group in miniature for the layer above raftlog: one
// shared log, a leader and a term, and replicas that really apply committed
// entries in order to their own bbolt files, on one applier goroutine (like
// raftlog's writer), calling Acknowledge before and Reveal after each commit.
type fakeCluster struct {
	t        *testing.T
	replicas []*replica
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}

	mu sync.Mutex
	// Guarded by mu.
	entries   []raftlog.Entry
	committed uint64
	term      uint64
	leader    int  // replica index, -1 for none
	hold      bool // append proposals without committing them
	applied   *sync.Cond
}

// replica is one node's processor over its own bbolt file; it implements
// Log for its processor.
type replica struct {
	c       *fakeCluster
	n       int
	db      *bolt.DB
	p       *Processor
	down    bool         // guarded by c.mu: stops applying (crashed)
	applied uint64       // guarded by c.mu
	reads   atomic.Int64 // ReadIndex calls whose ctx carries countedRead
}

// countedRead marks the context of a request whose ReadIndex rounds a test
// counts (replica.reads), apart from the leader loops' own.
type countedRead struct{}

var stateBucket = []byte("state")

func newFakeCluster(t *testing.T, n int, configure func(i int, cfg *Config)) *fakeCluster {
	t.Helper()
	c := &fakeCluster{t: t, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), leader: -1}
	c.applied = sync.NewCond(&c.mu)
	dir := t.TempDir()
	for i := range n {
		db, err := bolt.Open(filepath.Join(dir, "node"+strconv.Itoa(i)+".db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(stateBucket); return err }); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t)
		if configure != nil {
			configure(i, &cfg)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{c: c, n: i, db: db, p: p}
		if err := db.View(func(tx *bolt.Tx) error { return p.Restore(tx.Bucket(stateBucket)) }); err != nil {
			t.Fatal(err)
		}
		c.replicas = append(c.replicas, r)
	}
	go c.applyLoop()
	for _, r := range c.replicas {
		r.p.Start(r)
	}
	t.Cleanup(func() {
		for _, r := range c.replicas {
			_ = r.p.Close()
		}
		close(c.stop)
		<-c.done
		c.mu.Lock()
		c.applied.Broadcast()
		c.mu.Unlock()
		for _, r := range c.replicas {
			_ = r.db.Close()
		}
	})
	return c
}

func testConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Services = staticServices{}
	cfg.Invoker.IdleRecheck = 5 * time.Millisecond
	cfg.Invoker.Retry = outbox.Policy{MaxAttempts: 5, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxRetryAfter: time.Second}
	cfg.Invoker.Retry.AttemptTimeout = 5 * time.Second
	cfg.Knobs = &Knobs{JitterSeed: 1}
	if testing.Verbose() {
		cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return cfg
}

func nodeID(i int) uint64 { return uint64(i + 1) }

// setLeader makes replica n the leader of a new term (-1: no leader).
// keepUncommitted commits what the old leader appended (the new leader had
// it); otherwise it is truncated (it never reached a majority).
func (c *fakeCluster) setLeader(n int, keepUncommitted bool) {
	c.mu.Lock()
	c.term++
	c.leader = n
	if keepUncommitted {
		if !c.hold {
			c.committed = uint64(len(c.entries))
		}
	} else {
		c.entries = c.entries[:c.committed]
	}
	term := c.term
	c.mu.Unlock()
	c.signal()
	for i, r := range c.replicas {
		ev := raftlog.LeaderEvent{Group: 1, Term: term, IsSelf: i == n}
		if n >= 0 {
			ev.Leader = nodeID(n)
		}
		r.p.OnLeadership(ev)
	}
}

func (c *fakeCluster) setHold(hold bool) {
	c.mu.Lock()
	c.hold = hold
	if !hold {
		c.committed = uint64(len(c.entries))
	}
	c.mu.Unlock()
	c.signal()
}

// commitUpTo commits the log up to index (while holding).
func (c *fakeCluster) commitUpTo(index uint64) {
	c.mu.Lock()
	c.committed = max(c.committed, min(index, uint64(len(c.entries))))
	c.mu.Unlock()
	c.signal()
}

// appendRaw appends an entry as the current leader would, committed.
func (c *fakeCluster) appendRaw(data []byte) {
	c.mu.Lock()
	c.entries = append(c.entries, raftlog.Entry{Index: uint64(len(c.entries) + 1), Term: c.term, Data: data})
	c.committed = uint64(len(c.entries))
	c.mu.Unlock()
	c.signal()
}

// countInvokes counts Invoke commands in the log.
func (c *fakeCluster) countInvokes(t *testing.T) int {
	return c.countCommands(t, isInvoke)
}

func isInvoke(cmd *rpc.Command) bool { return cmd.GetInvoke() != nil }

// countCommands counts commands in the log that match.
func (c *fakeCluster) countCommands(t *testing.T, match func(*rpc.Command) bool) int {
	t.Helper()
	n := 0
	for _, m := range c.commandsPerEntry(t, match) {
		n += m
	}
	return n
}

// commandsPerEntry counts, entry by entry, the commands of the log that
// match.
func (c *fakeCluster) commandsPerEntry(t *testing.T, match func(*rpc.Command) bool) []int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := make([]int, len(c.entries))
	for i, e := range c.entries {
		b, err := rpc.DecodeBatch(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range b.Commands {
			if match(cmd) {
				counts[i]++
			}
		}
	}
	return counts
}

func (c *fakeCluster) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *fakeCluster) applyLoop() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		for _, r := range c.replicas {
			c.mu.Lock()
			if r.down || r.applied >= c.committed {
				c.mu.Unlock()
				continue
			}
			batch := append([]raftlog.Entry(nil), c.entries[r.applied:c.committed]...)
			c.mu.Unlock()
			// Like raftlog: Acknowledge before the commit, Reveal after.
			var fx raftlog.Applied
			err := r.db.Update(func(tx *bolt.Tx) error {
				var err error
				if fx, err = r.p.Apply(tx.Bucket(stateBucket), batch); err == nil && fx.Acknowledge != nil {
					fx.Acknowledge()
				}
				return err
			})
			if err != nil {
				c.t.Errorf("replica %d: apply: %v", r.n, err)
				return
			}
			if fx.Reveal != nil {
				fx.Reveal()
			}
			c.mu.Lock()
			r.applied = batch[len(batch)-1].Index
			c.applied.Broadcast()
			c.mu.Unlock()
		}
	}
}

// waitApplied blocks until every live replica applied everything committed.
func (c *fakeCluster) waitApplied() {
	c.t.Helper()
	c.signal()
	// Generous: TestLargeBacklogBounded applies 20,000 Invokes in one
	// transaction, which takes seconds under -race on a busy machine.
	testutil.WaitFor(c.t, 15*time.Second, "replicas applied the log", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range c.replicas {
			if !r.down && r.applied < c.committed {
				return false
			}
		}
		return true
	})
}

func (r *replica) Propose(ctx context.Context, data []byte) (raftlog.Proposal, error) {
	c := r.c
	c.mu.Lock()
	if c.leader != r.n || r.down {
		defer c.mu.Unlock()
		return raftlog.Proposal{}, &raftlog.NotLeaderError{Group: 1, Leader: c.leaderIDLocked(), Term: c.term}
	}
	e := raftlog.Entry{Index: uint64(len(c.entries) + 1), Term: c.term, Data: append([]byte(nil), data...)}
	c.entries = append(c.entries, e)
	if !c.hold {
		c.committed = e.Index
	}
	c.mu.Unlock()
	c.signal()
	return raftlog.Proposal{Index: e.Index, Term: e.Term}, nil
}

func (r *replica) ReadIndex(ctx context.Context) error {
	if ctx.Value(countedRead{}) != nil {
		r.reads.Add(1)
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != r.n || r.down {
		return &raftlog.NotLeaderError{Group: 1, Leader: c.leaderIDLocked(), Term: c.term}
	}
	target, term := c.committed, c.term
	c.signal()
	// Wake the wait below when ctx ends, so a stuck read fails instead of
	// hanging the test.
	stopWake := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.applied.Broadcast()
		c.mu.Unlock()
	})
	defer stopWake()
	for r.applied < target {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-c.stop:
			return raftlog.ErrStopped
		default:
		}
		c.applied.Wait()
		if c.term != term {
			return &raftlog.NotLeaderError{Group: 1, Leader: c.leaderIDLocked(), Term: c.term}
		}
	}
	return nil
}

func (r *replica) View(fn func(b *bolt.Bucket) error) error {
	return r.db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(stateBucket)) })
}

func (r *replica) Status() raftlog.Status {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return raftlog.Status{Group: 1, Leader: c.leaderIDLocked(), Term: c.term, IsLeader: c.leader == r.n, Applied: r.applied, Committed: c.committed}
}

func (c *fakeCluster) leaderIDLocked() uint64 {
	if c.leader < 0 {
		return 0
	}
	return nodeID(c.leader)
}

// dump returns every key and value beneath the replica's state bucket.
func (r *replica) dump(t testing.TB) string { return dumpState(t, r.View) }

// dumpState returns every key and value beneath the bucket view reads.
func dumpState(t testing.TB, view func(func(*bolt.Bucket) error) error) string {
	t.Helper()
	var buf bytes.Buffer
	var walk func(prefix string, b *bolt.Bucket) error
	walk = func(prefix string, b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				fmt.Fprintf(&buf, "%s/%x/\n", prefix, k)
				return walk(prefix+"/"+string(k), b.Bucket(k))
			}
			fmt.Fprintf(&buf, "%s/%x = %x\n", prefix, k, v)
			return nil
		})
	}
	if err := view(func(b *bolt.Bucket) error { return walk("", b) }); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// staticServices is a fixed ServiceLookup.
type staticServices map[string]*rpc.Service

func (s staticServices) Lookup(ctx context.Context, name string) (*rpc.Service, error) {
	if svc, ok := s[name]; ok {
		return svc, nil
	}
	return nil, fmt.Errorf("service %q: %w", name, rpc.ErrNotFound)
}

// recordingService counts deliveries per invocation id and answers with
// what answer returns (default: 200 echoing the body).
type recordingService struct {
	srv *httptest.Server

	mu         sync.Mutex
	deliveries map[string]int // guarded by mu
	headers    map[string]http.Header
	inflight   int // guarded by mu
	maxInfl    int // guarded by mu
	answer     func(id string, attempt int, body []byte) (int, http.Header, []byte)
	block      chan struct{} // when non-nil, handlers wait for it to close
}

func newRecordingService(t testing.TB) *recordingService {
	s := &recordingService{deliveries: make(map[string]int), headers: make(map[string]http.Header)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *recordingService) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get(headerInvocationID)
	s.mu.Lock()
	s.deliveries[id]++
	s.headers[id] = r.Header.Clone()
	n := s.deliveries[id]
	s.inflight++
	s.maxInfl = max(s.maxInfl, s.inflight)
	answer, block := s.answer, s.block
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	if block != nil {
		select {
		case <-block:
		case <-r.Context().Done():
			return
		}
	}
	status, hdr, out := http.StatusOK, http.Header{}, append([]byte("echo:"), body...)
	if answer != nil {
		status, hdr, out = answer(id, n, body)
	}
	for k, v := range hdr {
		w.Header()[k] = v
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/plain")
	}
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

func (s *recordingService) count(id invocation.ID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries[id.String()]
}

func (s *recordingService) total() (ids, deliveries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.deliveries {
		deliveries += n
	}
	return len(s.deliveries), deliveries
}

func (s *recordingService) lookup(name string) staticServices {
	return staticServices{name: {Name: name, Url: s.srv.URL}}
}

// manualClock is an injected clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
}

func (m *manualClock) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

func (m *manualClock) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
}

func newInvoke(service string, n int) *rpc.Invoke {
	id := invocation.Random()
	return &rpc.Invoke{
		InvocationId: id.Bytes(),
		RequestId:    invocation.NewRequestID(),
		Service:      service,
		Handler:      "greet",
		Body:         []byte("hello " + strconv.Itoa(n)),
		ContentType:  "text/plain",
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
