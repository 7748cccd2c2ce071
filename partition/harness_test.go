package partition

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	"github.com/raftgate/raftgate/raftlog/raftlogtest"
	"github.com/raftgate/raftgate/rpc"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
)

// fakeCluster runs the partition's Raft group on real raftlog nodes
// (raftlogtest: own write-ahead log, bbolt state file and applier each, an
// in-memory network, manual ticks), one Processor per replica, so the
// processors see raftlog's own order: Apply, Acknowledge and Reveal in the
// applier's open transaction, the checkpoint later. The test chooses the
// leader (setLeader) and may hold commits (setHold, commitUpTo). A
// one-replica cluster gets a second voter without a processor, so that its
// commits can be held and its log read from the network (entryCount).
type fakeCluster struct {
	t        *testing.T
	rc       *raftlogtest.Cluster
	replicas []*replica

	mu sync.Mutex
	// Guarded by mu.
	leader int  // replica index setLeader chose, -1 before
	hold   bool // append proposals without committing them
}

// replica is one node's processor over its raftlog group; it implements
// Log for its processor.
type replica struct {
	c *fakeCluster
	n int
	g *raftlog.Group
	p *Processor
	// down (guarded by c.mu) refuses proposals and reads; from the next
	// setLeader, waitApplied or signal the node is also cut off from the
	// others (crashed). Setting it back heals the network.
	down bool
	// db, in tests that apply to a bbolt file of their own without a
	// cluster, is the replica's whole state (only View and dump work).
	db *bolt.DB
	// reads counts ReadIndex calls whose ctx carries countedRead.
	reads atomic.Int64
}

// countedRead marks the context of a request whose ReadIndex rounds a test
// counts (replica.reads), apart from the leader loops' own.
type countedRead struct{}

func newFakeCluster(t *testing.T, n int, configure func(i int, cfg *Config)) *fakeCluster {
	t.Helper()
	c := &fakeCluster{t: t, leader: -1}
	for i := range n {
		cfg := testConfig(t)
		if configure != nil {
			configure(i, &cfg)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.replicas = append(c.replicas, &replica{c: c, n: i, p: p})
	}
	c.rc = raftlogtest.New(t, raftlogtest.Options{
		Nodes: max(n, 2),
		// The partition's own group id: processors take only their
		// group's leadership events.
		Group: raftlog.GroupID(c.replicas[0].p.cfg.Partition),
		StateMachine: func(i int) raftlog.StateMachine {
			if i < n {
				return c.replicas[i].p
			}
			return bareState{}
		},
		Watch: func(i int, ev raftlog.LeaderEvent) {
			if i < n {
				c.replicas[i].p.OnLeadership(ev)
			}
		},
	})
	for i, r := range c.replicas {
		r.g = c.rc.Group(i)
		r.p.Start(r)
	}
	// Runs before the nodes close (cleanups run last first).
	t.Cleanup(func() {
		for _, r := range c.replicas {
			_ = r.p.Close()
		}
	})
	return c
}

// stateBucket is the state bucket of the tests that apply to a bbolt file
// of their own, without a cluster.
var stateBucket = []byte("state")

// bareState is the state machine of the voter without a processor.
type bareState struct{}

func (bareState) Apply(*bolt.Bucket, []raftlog.Entry) (raftlog.Applied, error) {
	return raftlog.Applied{}, nil
}

func (bareState) Restore(*bolt.Bucket) error { return nil }

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

// setLeader makes replica n the leader of a new term and returns once
// every live processor knows it (and, unless commits are held, applied
// what it committed). keepUncommitted says that the new leader has what
// the old one appended, to commit it: here every follower has it (only
// commits are held), so false is only for a log with nothing pending.
func (c *fakeCluster) setLeader(n int, keepUncommitted bool) {
	c.t.Helper()
	c.signal()
	if !keepUncommitted && c.pending() {
		c.t.Fatal("setLeader(_, false) with uncommitted entries: the followers have them")
	}
	c.rc.Elect(n)
	term := c.rc.Group(n).Status().Term
	c.mu.Lock()
	c.leader = n
	hold := c.hold
	c.mu.Unlock()
	testutil.WaitFor(c.t, 20*time.Second, "processors to learn the new leader", func() bool {
		for _, r := range c.live() {
			if _, _, t := r.p.tracker.Leadership(); t < term {
				return false
			}
		}
		return true
	})
	if !hold {
		c.waitApplied()
	}
}

// pending says whether the leader appended entries with data it has not
// committed.
func (c *fakeCluster) pending() bool {
	lead := c.rc.Leader()
	if lead < 0 {
		return false
	}
	ents := c.rc.Appended()
	return len(ents) > 0 && ents[len(ents)-1].Index > c.rc.Group(lead).Status().Committed
}

// setHold holds (or releases) the commits of what the leader appends from
// now on.
func (c *fakeCluster) setHold(hold bool) {
	c.mu.Lock()
	c.hold = hold
	c.mu.Unlock()
	if !hold {
		c.rc.ReleaseCommits()
		return
	}
	var committed uint64
	if lead := c.rc.Leader(); lead >= 0 {
		committed = c.rc.Group(lead).Status().Committed
	}
	c.rc.HoldCommits(committed)
}

// commitUpTo commits (while holding) the log up to its index-th entry with
// data, and the entries without data before the next one (raft commits an
// older term's entry only with one of the leader's term).
func (c *fakeCluster) commitUpTo(index int) {
	c.t.Helper()
	ents := c.rc.Appended()
	if index > len(ents) {
		c.t.Fatalf("commitUpTo(%d): %d entries appended", index, len(ents))
	}
	limit := ents[index-1].Index
	if index < len(ents) {
		limit = ents[index].Index - 1
	}
	c.rc.HoldCommits(limit)
}

// appendRaw appends an entry as the current leader would, bypassing its
// processor; before any setLeader, the voter without a processor leads.
func (c *fakeCluster) appendRaw(data []byte) {
	c.t.Helper()
	c.mu.Lock()
	lead := c.leader
	c.mu.Unlock()
	if lead < 0 {
		if c.rc.Len() == len(c.replicas) {
			c.t.Fatal("appendRaw before setLeader needs a one-replica cluster")
		}
		lead = len(c.replicas)
		if c.rc.Leader() != lead {
			c.rc.Elect(lead)
		}
	}
	if _, err := c.rc.Group(lead).Propose(ctxT(c.t), data); err != nil {
		c.t.Fatal(err)
	}
}

// entryCount is the number of entries with data in the leader's log.
func (c *fakeCluster) entryCount() int { return len(c.rc.Appended()) }

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
	ents := c.rc.Appended()
	counts := make([]int, len(ents))
	for i, e := range ents {
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

// signal cuts the replicas that are down off the network, and heals it
// when none is.
func (c *fakeCluster) signal() {
	var down []int
	for _, r := range c.replicas {
		c.mu.Lock()
		if r.down {
			down = append(down, r.n)
		}
		c.mu.Unlock()
	}
	c.rc.Net.Heal()
	all := make([]uint64, c.rc.Len())
	for i := range all {
		all[i] = c.rc.NodeID(i)
	}
	for _, n := range down {
		c.rc.Net.Isolate(c.rc.NodeID(n), all)
	}
}

// live returns the replicas that are not down.
func (c *fakeCluster) live() []*replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*replica
	for _, r := range c.replicas {
		if !r.down {
			out = append(out, r)
		}
	}
	return out
}

// waitApplied blocks until every live replica applied everything the
// leader committed.
func (c *fakeCluster) waitApplied() {
	c.t.Helper()
	c.signal()
	var nodes []int
	for _, r := range c.live() {
		nodes = append(nodes, r.n)
	}
	c.rc.WaitApplied(nodes...)
}

func (r *replica) isDown() bool {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	return r.down
}

func (r *replica) Propose(ctx context.Context, data []byte) (raftlog.Proposal, error) {
	if r.isDown() {
		return raftlog.Proposal{}, &raftlog.NotLeaderError{Group: r.g.ID()}
	}
	return r.g.Propose(ctx, data)
}

func (r *replica) ReadIndex(ctx context.Context) error {
	if ctx.Value(countedRead{}) != nil {
		r.reads.Add(1)
	}
	if r.isDown() {
		return &raftlog.NotLeaderError{Group: r.g.ID()}
	}
	return r.g.ReadIndex(ctx)
}

func (r *replica) View(ctx context.Context, fn func(b *bolt.Bucket) error) error {
	if r.db != nil {
		return r.db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(stateBucket)) })
	}
	return r.g.View(ctx, fn)
}

func (r *replica) ViewCheckpoint(ctx context.Context, fn func(b *bolt.Bucket) error) error {
	if r.db != nil {
		return r.View(ctx, fn)
	}
	return r.g.ViewCheckpoint(ctx, fn)
}

func (r *replica) Status() raftlog.Status { return r.g.Status() }

// dump returns every key and value beneath the replica's state bucket.
func (r *replica) dump(t testing.TB) string { return dumpState(t, r.View) }

// dumpState returns every key and value beneath the bucket view reads.
func dumpState(t testing.TB, view func(context.Context, func(*bolt.Bucket) error) error) string {
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
	if err := view(context.Background(), func(b *bolt.Bucket) error { return walk("", b) }); err != nil {
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
