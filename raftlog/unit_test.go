package raftlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
)

func TestConfigValidateNamesTheBadField(t *testing.T) {
	good := Config{NodeID: 1, DataDir: "/tmp/x", Peers: map[uint64]string{1: "a:1"}}
	if err := good.Validate(); err != nil {
		t.Fatalf("zero-defaulted config invalid: %v", err)
	}
	cases := map[string]func(*Config){
		"NodeID":                 func(c *Config) { c.NodeID = 0 },
		"DataDir":                func(c *Config) { c.DataDir = "" },
		"Peers":                  func(c *Config) { c.Peers = map[uint64]string{2: "b:1"} },
		"ElectionTicks":          func(c *Config) { c.ElectionTicks, c.HeartbeatTicks = 2, 2 },
		"TickInterval":           func(c *Config) { c.TickInterval = time.Microsecond },
		"SnapshotCatchUpEntries": func(c *Config) { c.SnapshotEntries, c.SnapshotCatchUpEntries = 10, 10 },
		"MaxInflightMsgs":        func(c *Config) { c.MaxInflightMsgs = -1 },
		"LeaderBalanceTicks":     func(c *Config) { c.LeaderBalanceTicks = 5 }, // not above ElectionTicks
	}
	for field, mutate := range cases {
		c := good
		c.Peers = map[uint64]string{1: "a:1"}
		mutate(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate() = %v", field, err)
		}
	}
	d := DefaultConfig()
	if d.TickInterval*time.Duration(d.ElectionTicks) > time.Second {
		t.Errorf("default election timeout %v exceeds 1s", d.TickInterval*time.Duration(d.ElectionTicks))
	}
}

// TestSnapshotCodecRoundTrip serialises nested buckets with sequences and
// installs them elsewhere, in well-filled pages; a flipped byte must be
// refused.
func TestSnapshotCodecRoundTrip(t *testing.T) {
	src, err := bolt.Open(filepath.Join(t.TempDir(), "src.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	err = src.Update(func(tx *bolt.Tx) error {
		root, _ := tx.CreateBucket([]byte("root"))
		_ = root.Put([]byte("k"), []byte("v"))
		_ = root.Put([]byte("empty"), []byte{})
		inner, _ := root.CreateBucket([]byte("inner"))
		_ = inner.SetSequence(42)
		for i := range 2000 {
			_ = inner.Put([]byte(fmt.Sprintf("key%05d", i)), bytes.Repeat([]byte{byte(i)}, 300))
		}
		deeper, _ := inner.CreateBucket([]byte("deeper"))
		return deeper.Put([]byte("x"), []byte("y"))
	})
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	chunks := 0
	err = src.View(func(tx *bolt.Tx) error {
		cw := &chunkWriter{emit: func(_ *pb.Message, data []byte, _ bool) error {
			chunks++
			stream.Write(data)
			return nil
		}}
		return encodeSnapshotStream(cw, tx.Bucket([]byte("root")))
	})
	if err != nil {
		t.Fatal(err)
	}
	if chunks < 2 {
		t.Errorf("600 KB snapshot sent in %d chunk(s)", chunks)
	}
	dst, err := bolt.Open(filepath.Join(t.TempDir(), "dst.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	err = dst.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucket([]byte("copy"))
		return decodeSnapshotInto(bytes.NewReader(stream.Bytes()), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = dst.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("copy"))
		inner := b.Bucket([]byte("inner"))
		switch {
		case string(b.Get([]byte("k"))) != "v":
			return errors.New("k lost")
		case inner == nil || inner.Sequence() != 42 || inner.Stats().KeyN < 2000:
			return errors.New("inner bucket lost")
		case string(inner.Bucket([]byte("deeper")).Get([]byte("x"))) != "y":
			return errors.New("deeper lost")
		case !bytes.Equal(inner.Get([]byte("key01999")), bytes.Repeat([]byte{byte(1999 % 256)}, 300)):
			return errors.New("value differs")
		}
		// Keys arrive in order: the pages are filled, not left half empty.
		if st := inner.Stats(); float64(st.LeafInuse) < 0.8*float64(st.LeafAlloc) {
			return fmt.Errorf("installed leaf pages %d%% full, want at least 80%%", 100*st.LeafInuse/st.LeafAlloc)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(stream.Bytes())
	corrupt[len(corrupt)/2] ^= 0xff
	err = dst.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucket([]byte("bad"))
		return decodeSnapshotInto(bytes.NewReader(corrupt), b)
	})
	if !errors.Is(err, errBadSnapshot) {
		t.Fatalf("corrupt snapshot: %v, want errBadSnapshot", err)
	}
}

func TestReadIndexBatchesAndWaitsForApply(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, nil)
	lead := c.leader(1, c.ids, 5*time.Second)
	for i := range 10 {
		if err := c.propose(lead, 1, fmt.Sprintf("e%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	g := c.nodes[lead].Group(1)
	// Hold the group's loop until all 50 reads are queued, so that the
	// test does not depend on how the goroutines happen to interleave:
	// the loop must then serve them with one ReadIndex round.
	blocked, release := make(chan struct{}), make(chan struct{})
	go func() { _ = g.call(context.Background(), func() { close(blocked); <-release }) }()
	<-blocked
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := g.ReadIndex(ctx); err != nil {
				errs <- err
				return
			}
			if st := g.Status(); st.Applied < 11 {
				errs <- fmt.Errorf("read returned at applied %d", st.Applied)
			}
		}()
	}
	testutil.WaitFor(t, 5*time.Second, "50 reads queued on the held loop", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.in.reads) == 50
	})
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var rounds uint64
	if err := g.call(context.Background(), func() { rounds = g.readSeq }); err != nil {
		t.Fatal(err)
	}
	if rounds != 1 {
		t.Errorf("50 queued reads took %d raft ReadIndex rounds; want them batched into one", rounds)
	}
	t.Logf("50 concurrent reads in %d ReadIndex rounds", rounds)
	// A leader cut off from its quorum cannot confirm a read index.
	c.nw.Isolate(lead, c.ids)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := g.ReadIndex(ctx)
	var nl *NotLeaderError
	if !errors.As(err, &nl) {
		t.Fatalf("isolated leader ReadIndex = %v, want NotLeaderError", err)
	}
}

func TestWatchStopAndErrStopped(t *testing.T) {
	c := newCluster(t, testSeed(t), 1, []GroupID{MetaGroup, 1}, nil)
	c.leader(1, c.ids, 2*time.Second)
	n := c.nodes[1]
	var mu sync.Mutex
	seen := map[GroupID]LeaderEvent{}
	cancel := n.Watch(func(ev LeaderEvent) {
		mu.Lock()
		seen[ev.Group] = ev
		mu.Unlock()
	})
	testutil.WaitFor(t, 2*time.Second, "an initial event per group", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2 && seen[1].IsSelf && seen[1].Leader == 1 && seen[MetaGroup].IsSelf
	})
	cancel()
	if _, err := n.Group(1).Propose(context.Background(), nil); !errors.Is(err, ErrEmptyProposal) {
		t.Fatalf("empty Propose = %v, want ErrEmptyProposal", err)
	}
	if _, err := n.AddGroup(1, []uint64{1}, &recordingSM{}); !errors.Is(err, ErrGroupExists) {
		t.Fatalf("second AddGroup = %v", err)
	}
	g := n.Group(1)
	c.stop(1)
	if _, err := g.Propose(context.Background(), []byte("x")); !errors.Is(err, ErrStopped) {
		t.Fatalf("Propose after Close = %v, want ErrStopped", err)
	}
	if err := g.ReadIndex(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("ReadIndex after Close = %v, want ErrStopped", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestManualTicksDriveElections: with Knobs.ManualTicks raft time moves
// only when the test calls Node.Tick, so elections happen on cue; and a
// dead leader is replaced within two election timeouts (raft's randomized
// timeout is below that; CheckQuorum and PreVote add no round).
func TestManualTicksDriveElections(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, func(cfg *Config) {
		cfg.Knobs = &Knobs{ManualTicks: true}
		if cfg.NodeID == 1 {
			cfg.Registerer = reg
		}
	})
	noLeader := func() bool {
		for _, id := range c.ids {
			if c.nodes[id].Group(1).leaderEvent().Leader != 0 {
				return false
			}
		}
		return true
	}
	// Below ElectionTicks nobody may campaign.
	for range 9 {
		c.tickSettled()
	}
	if !noLeader() {
		t.Fatal("a leader was elected before any election timeout elapsed")
	}
	// agreed returns the leader every node names, or 0.
	agreed := func() uint64 {
		var lead uint64
		for _, id := range c.ids {
			ev := c.nodes[id].Group(1).leaderEvent()
			if ev.Leader == 0 || (lead != 0 && ev.Leader != lead) {
				return 0
			}
			lead = ev.Leader
		}
		return lead
	}
	ticks, firstLeader := 9, 0
	var lead uint64
	for lead == 0 && ticks < 300 {
		c.tickSettled()
		ticks++
		if firstLeader == 0 && !noLeader() {
			firstLeader = ticks
		}
		lead = agreed()
	}
	if lead == 0 {
		t.Fatalf("no agreed leader after %d manual ticks", ticks)
	}
	t.Logf("leader %d elected after %d manual ticks", lead, firstLeader)
	if firstLeader < 10 {
		t.Errorf("election after %d ticks, before ElectionTicks", firstLeader)
	}
	// Metrics land on the node's own registry.
	if err := c.propose(lead, 1, "counted"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "node 1 to apply", func() bool { return len(entriesOf(t, c.nodes[1].Group(1))) == 1 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
	}
	for _, name := range []string{"raftgate_raft_applied_entries_total", "raftgate_wal_fsync_seconds", "raftgate_checkpoint_seconds", "raftgate_raft_applied_index", "raftgate_raft_leader_changes_all_groups_total"} {
		if !found[name] {
			t.Errorf("metric %s not registered", name)
		}
	}

	c.stop(lead)
	survivors := c.running()
	replaced := func() bool {
		var next uint64
		for _, id := range survivors {
			ev := c.nodes[id].Group(1).leaderEvent()
			if ev.Leader == 0 || ev.Leader == lead || (next != 0 && ev.Leader != next) {
				return false
			}
			next = ev.Leader
		}
		return true
	}
	limit := 2 * c.config(1).ElectionTicks
	ticks = 0
	for !replaced() && ticks < limit {
		c.tickSettled()
		ticks++
	}
	if !replaced() {
		t.Fatalf("dead leader %d not replaced after %d manual ticks (2 election timeouts)", lead, ticks)
	}
	t.Logf("dead leader %d replaced after %d manual ticks", lead, ticks)
}

// orderSM records the order in which Acknowledge and Reveal run.
type orderSM struct {
	mu       sync.Mutex
	acked    []string
	revealed []string
	errs     []error
}

func (s *orderSM) Apply(b *bolt.Bucket, ents []Entry) (Applied, error) {
	for _, e := range ents {
		if err := b.Put(e.Data, []byte{1}); err != nil {
			return Applied{}, err
		}
	}
	key := string(ents[len(ents)-1].Data)
	return Applied{
		Acknowledge: func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.acked = append(s.acked, key)
		},
		Reveal: func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			// Applies of one batch are all acknowledged before any is
			// revealed; reveals follow the acknowledgements' order.
			if n := len(s.revealed); n >= len(s.acked) || s.acked[n] != key {
				s.errs = append(s.errs, fmt.Errorf("%s revealed out of order or before it was acknowledged (acknowledged %v, revealed %v)", key, s.acked, s.revealed))
			}
			s.revealed = append(s.revealed, key)
		},
	}, nil
}

func (s *orderSM) Restore(*bolt.Bucket) error { return nil }

// TestReadsSeeAppliedStateBeforeItsCheckpoint: once an entry is applied,
// View sees it although no checkpoint has committed it to state.db (a bbolt
// read transaction does not see it yet); Acknowledge runs before Reveal,
// once per Apply, in order; closing the node checkpoints, so a restart
// finds everything.
func TestReadsSeeAppliedStateBeforeItsCheckpoint(t *testing.T) {
	c := newCluster(t, testSeed(t), 1, []GroupID{1}, func(cfg *Config) {
		cfg.CheckpointInterval = time.Hour
		cfg.CheckpointEntries = 1 << 30
	})
	c.leader(1, c.ids, 2*time.Second)
	sm := &orderSM{}
	g, err := c.nodes[1].AddGroup(2, c.ids, sm)
	if err != nil {
		t.Fatal(err)
	}
	c.leader(2, c.ids, 2*time.Second)
	const n = 20
	for i := range n {
		if _, err := g.Propose(context.Background(), fmt.Appendf(nil, "k%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "every entry revealed", func() bool {
		sm.mu.Lock()
		defer sm.mu.Unlock()
		return len(sm.revealed) > 0 && sm.revealed[len(sm.revealed)-1] == fmt.Sprintf("k%02d", n-1)
	})
	if err := g.ReadIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	key := []byte(fmt.Sprintf("k%02d", n-1))
	var viewed, checkpointed bool
	if err := g.View(context.Background(), func(b *bolt.Bucket) error { viewed = b.Get(key) != nil; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[1].db.View(func(tx *bolt.Tx) error {
		gb, err := openGroupBuckets(tx, 2)
		if err == nil {
			checkpointed = gb.state.Get(key) != nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !viewed || checkpointed {
		t.Fatalf("after apply: View sees %s = %v (want true), state.db has it = %v (want false: no checkpoint yet)", key, viewed, checkpointed)
	}
	sm.mu.Lock()
	for _, err := range sm.errs {
		t.Error(err)
	}
	if !slices.Equal(sm.acked, sm.revealed) {
		t.Errorf("acknowledged %v, revealed %v: want the same Applies in the same order", sm.acked, sm.revealed)
	}
	sm.mu.Unlock()
	c.stop(1)
	c.start(1)
	checkpointed = false
	if err := c.nodes[1].db.View(func(tx *bolt.Tx) error {
		gb, err := openGroupBuckets(tx, 2)
		if err == nil {
			checkpointed = gb.state.Get(key) != nil
		}
		return err
	}); err != nil || !checkpointed {
		t.Fatalf("after a clean stop state.db has %s = %v (%v), want it checkpointed", key, checkpointed, err)
	}
}

// TestRaftLoggerDemotesRoutineMessages: raft's routine async-write notices
// go out at debug level, everything else raft says at info stays at info.
func TestRaftLoggerDemotesRoutineMessages(t *testing.T) {
	var buf bytes.Buffer
	l := raftLogger{zerolog.New(&buf).Level(zerolog.InfoLevel)}
	l.Infof("entry at index %d missing from unstable log; ignoring", 7)
	l.Infof("entry at index %d matched unstable snapshot; ignoring", 7)
	if buf.Len() != 0 {
		t.Fatalf("routine notices logged at info: %s", buf.String())
	}
	l.Infof("%x became leader at term %d", 1, 2)
	if !strings.Contains(buf.String(), "became leader at term 2") {
		t.Fatalf("info message lost: %q", buf.String())
	}
}

// TestRaftLoggerTagsItsComponent: the raft library's messages carry
// component "raft" and their group, and Config.RaftLogLevel drops those
// below it (never raftlog's own).
func TestRaftLoggerTagsItsComponent(t *testing.T) {
	var buf bytes.Buffer
	cfg := Config{Logger: zerolog.New(&buf)}
	newRaftLogger(cfg, 3).Infof("%x became leader at term %d", 1, 2)
	var rec struct {
		Component string
		Group     uint32
		Message   string
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec.Component != "raft" || rec.Group != 3 {
		t.Fatalf("raft's message logged as %s (%v), want component raft, group 3", buf.String(), err)
	}
	buf.Reset()
	cfg.RaftLogLevel = zerolog.WarnLevel
	l := newRaftLogger(cfg, 3)
	l.Infof("%x became leader at term %d", 1, 2)
	if buf.Len() != 0 {
		t.Fatalf("raft's info message passed RaftLogLevel warn: %s", buf.String())
	}
	l.Warningf("%x stepped down", 1)
	if !strings.Contains(buf.String(), "stepped down") {
		t.Fatalf("raft's warning dropped: %q", buf.String())
	}
}

// TestCatchUpOnFollower: a follower's CatchUp returns only once it applied
// what the leader had committed at the call; a follower cut off from every
// leader does not return early.
func TestCatchUpOnFollower(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, nil)
	lead := c.leader(1, c.ids, 5*time.Second)
	var follower uint64
	for _, id := range c.ids {
		if id != lead {
			follower = id
			break
		}
	}
	// Slow the network so that the follower's apply trails the leader's
	// commit when CatchUp is called.
	c.nw.SetFaults(0, 20*time.Millisecond)
	for i := range 20 {
		if err := c.propose(lead, 1, fmt.Sprintf("e%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	committed := c.nodes[lead].Group(1).Status().Committed
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g := c.nodes[follower].Group(1)
	if err := g.CatchUp(ctx); err != nil {
		t.Fatalf("follower CatchUp: %v", err)
	}
	if applied := c.sms[follower][1].appliedIndex(); applied < committed {
		t.Fatalf("follower CatchUp returned at applied %d, leader had committed %d", applied, committed)
	}
	// ReadIndex stays leader-only.
	var nl *NotLeaderError
	if err := g.ReadIndex(ctx); !errors.As(err, &nl) {
		t.Fatalf("follower ReadIndex = %v, want NotLeaderError", err)
	}
	// Cut off, the follower cannot confirm a read index: it must not
	// return success.
	c.nw.SetFaults(0, 0)
	c.nw.Isolate(follower, c.ids)
	short, cancelShort := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShort()
	if err := g.CatchUp(short); err == nil {
		t.Fatal("isolated follower's CatchUp succeeded")
	}
}

// TestBackupRestoresAndStopsOnClose: a copy taken from a running node
// opens as a node with the same log and state; closing the node ends a
// copy in progress instead of waiting for its reader.
func TestBackupRestoresAndStopsOnClose(t *testing.T) {
	c := newCluster(t, testSeed(t), 1, []GroupID{1}, nil)
	for _, e := range []string{"a", "b", "c"} {
		if err := c.proposeAnywhere(1, e); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	var size int64 = -1
	n, err := c.nodes[1].Backup(&buf, func(s int64) { size = s })
	if err != nil || n != size || int64(buf.Len()) != n {
		t.Fatalf("Backup = %d, %v; announced %d, wrote %d", n, err, size, buf.Len())
	}
	c.stop(1)
	c.dirs[1] = t.TempDir()
	if err := os.WriteFile(filepath.Join(c.dirs[1], stateFile), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	c.start(1)
	c.leader(1, c.ids, 5*time.Second)
	if got := entriesOf(t, c.nodes[1].Group(1)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("node opened from the copy has %v", got)
	}

	// The reader closes the node at its first write; the copy must then
	// fail with ErrStopped rather than hold Close on its read transaction.
	node := c.nodes[1]
	closed := make(chan error, 1)
	w := writerFunc(func(p []byte) (int, error) {
		if !node.isClosed() {
			go func() { closed <- node.Close() }()
			testutil.WaitFor(t, 5*time.Second, "the node to start closing", node.isClosed)
		}
		return len(p), nil
	})
	if _, err := node.Backup(w, func(int64) {}); !errors.Is(err, ErrStopped) {
		t.Fatalf("Backup while the node closes = %v, want ErrStopped", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	delete(c.nodes, 1)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
