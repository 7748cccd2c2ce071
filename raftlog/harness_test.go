package raftlog

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
)

var seedFlag = flag.Uint64("seed", 0, "seed for the in-memory network's faults (0: from RAFTLOG_SEED or the clock)")

// testSeed picks the fault seed and prints it when the test fails.
func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		if s, err := strconv.ParseUint(os.Getenv("RAFTLOG_SEED"), 10, 64); err == nil {
			seed = s
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with -seed=%d (or RAFTLOG_SEED=%d)", seed, seed)
		}
	})
	return seed
}

// recordingSM appends every entry's data to a nested bucket "entries" under
// a sequence number, so replicas can be compared byte for byte, and counts
// applied entries in the root bucket.
type recordingSM struct {
	mu      sync.Mutex
	applied uint64 // durable applied index (set in Reveal)
	count   uint64 // entries in the bucket (rebuilt by Restore)
	failOn  string // Apply fails on an entry with this data
	// reveals counts entries whose Reveal ran, restores Restore calls.
	reveals, restores int
}

var bucketEntries = []byte("entries")

// errToldToFail is recordingSM's Apply error on its failOn entry.
var errToldToFail = errors.New("recordingSM: told to fail")

func (s *recordingSM) Apply(b *bolt.Bucket, ents []Entry) (Applied, error) {
	eb, err := b.CreateBucketIfNotExists(bucketEntries)
	if err != nil {
		return Applied{}, err
	}
	s.mu.Lock()
	failOn := s.failOn
	s.mu.Unlock()
	for _, e := range ents {
		if failOn != "" && string(e.Data) == failOn {
			return Applied{}, errToldToFail
		}
		seq, err := eb.NextSequence()
		if err != nil {
			return Applied{}, err
		}
		if err := eb.Put(binary.BigEndian.AppendUint64(nil, seq), e.Data); err != nil {
			return Applied{}, err
		}
	}
	last := ents[len(ents)-1].Index
	total := eb.Sequence()
	if err := b.Put([]byte("count"), binary.BigEndian.AppendUint64(nil, total)); err != nil {
		return Applied{}, err
	}
	n := len(ents)
	return Applied{Reveal: func() {
		s.mu.Lock()
		s.applied, s.count = last, total
		s.reveals += n
		s.mu.Unlock()
	}}, nil
}

func (s *recordingSM) Restore(b *bolt.Bucket) error {
	var count uint64
	if v := b.Get([]byte("count")); v != nil {
		count = binary.BigEndian.Uint64(v)
	}
	s.mu.Lock()
	s.count = count
	s.restores++
	s.mu.Unlock()
	return nil
}

func (s *recordingSM) appliedIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied
}

// entries reads the recorded sequence of a group on one node.
func entriesOf(t testing.TB, g *Group) []string {
	t.Helper()
	var out []string
	err := g.View(context.Background(), func(b *bolt.Bucket) error {
		eb := b.Bucket(bucketEntries)
		if eb == nil {
			return nil
		}
		return eb.ForEach(func(_, v []byte) error {
			out = append(out, string(v))
			return nil
		})
	})
	if err != nil {
		t.Fatalf("view group %d: %v", g.ID(), err)
	}
	return out
}

// cluster is a set of nodes over the in-memory network.
type cluster struct {
	t      testing.TB
	nw     *MemNetwork
	ids    []uint64
	groups []GroupID
	dirs   map[uint64]string
	nodes  map[uint64]*Node
	sms    map[uint64]map[GroupID]*recordingSM
	tune   func(*Config)
	// replicas: a node listed here joins its groups (JoinGroup) with this
	// replica id instead of bootstrapping them.
	replicas map[uint64]uint64
}

func newCluster(t testing.TB, seed uint64, size int, groups []GroupID, tune func(*Config)) *cluster {
	c := &cluster{
		t: t, nw: NewMemNetwork(seed), groups: groups, tune: tune,
		dirs: make(map[uint64]string), nodes: make(map[uint64]*Node),
		sms: make(map[uint64]map[GroupID]*recordingSM), replicas: make(map[uint64]uint64),
	}
	for i := 1; i <= size; i++ {
		id := uint64(i)
		c.ids = append(c.ids, id)
		c.dirs[id] = t.TempDir()
	}
	for _, id := range c.ids {
		c.start(id)
	}
	t.Cleanup(func() {
		for _, id := range c.ids {
			c.stop(id)
		}
	})
	return c
}

func (c *cluster) config(id uint64) Config {
	peers := make(map[uint64]string)
	for _, p := range c.ids {
		peers[p] = fmt.Sprintf("mem-%d", p)
	}
	cfg := Config{
		NodeID:          id,
		DataDir:         c.dirs[id],
		Peers:           peers,
		TickInterval:    20 * time.Millisecond,
		ElectionTicks:   10,
		HeartbeatTicks:  1,
		SnapshotEntries: 100000,
		Logger:          zerolog.New(zerolog.NewTestWriter(c.t)).Level(zerolog.WarnLevel).With().Uint64("node", id).Logger(),
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

func (c *cluster) start(id uint64) {
	c.t.Helper()
	n, err := open(c.config(id), c.nw.transportFor)
	if err != nil {
		c.t.Fatalf("open node %d: %v", id, err)
	}
	c.nodes[id] = n
	c.sms[id] = make(map[GroupID]*recordingSM)
	for _, gid := range c.groups {
		sm := &recordingSM{}
		var err error
		if r := c.replicas[id]; r != 0 {
			_, err = n.JoinGroup(gid, r, sm)
		} else {
			_, err = n.AddGroup(gid, c.ids, sm)
		}
		if err != nil {
			c.t.Fatalf("node %d add group %d: %v", id, gid, err)
		}
		c.sms[id][gid] = sm
	}
}

func (c *cluster) stop(id uint64) {
	if n := c.nodes[id]; n != nil {
		if err := n.Close(); err != nil {
			c.t.Errorf("close node %d: %v", id, err)
		}
		delete(c.nodes, id)
	}
}

// leader waits until the running nodes among among agree on one leader of
// gid and returns it.
func (c *cluster) leader(gid GroupID, among []uint64, timeout time.Duration) uint64 {
	c.t.Helper()
	var lead uint64
	testutil.WaitFor(c.t, timeout, fmt.Sprintf("a leader of group %d among %v", gid, among), func() bool {
		lead = 0
		for _, id := range among {
			n := c.nodes[id]
			if n == nil {
				continue
			}
			ev := n.Group(gid).leaderEvent()
			if ev.Leader == 0 || !slices.Contains(among, ev.Leader) {
				return false
			}
			if lead != 0 && ev.Leader != lead {
				return false
			}
			lead = ev.Leader
		}
		return lead != 0 && c.nodes[lead].Group(gid).leaderEvent().IsSelf
	})
	return lead
}

// proposeAnywhere proposes data on whichever node leads gid, retrying
// (whole) when leadership moves, until one node applied it as leader. A
// retried entry may appear twice; tests compare replicas, not counts.
func (c *cluster) proposeAnywhere(gid GroupID, data string) error {
	var err error
	for range 10 {
		lead := c.leader(gid, c.running(), 10*time.Second)
		if err = c.propose(lead, gid, data); err == nil {
			return nil
		}
	}
	return err
}

func (c *cluster) running() []uint64 {
	var out []uint64
	for _, id := range c.ids {
		if c.nodes[id] != nil {
			out = append(out, id)
		}
	}
	return out
}

// propose proposes data on node id and waits until that node applied it.
func (c *cluster) propose(id uint64, gid GroupID, data string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := c.nodes[id].Group(gid).Propose(ctx, []byte(data))
	if err != nil {
		return err
	}
	sm := c.sms[id][gid]
	for sm.appliedIndex() < p.Index {
		if ctx.Err() != nil {
			return fmt.Errorf("entry %d not applied: %w", p.Index, ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// tickSettled advances every running node's raft clock by one tick
// (Knobs.ManualTicks) and waits until the nodes settle: votes and
// acknowledgements go out after an fsync, so raft time must never outrun
// the disk for a manually ticked test to be deterministic.
func (c *cluster) tickSettled() {
	c.t.Helper()
	running := c.running()
	for _, id := range running {
		c.nodes[id].Tick()
	}
	// sync waits until every group's loop handled what was queued so far.
	sync := func() {
		for _, id := range running {
			for _, gid := range c.groups {
				if err := c.nodes[id].Group(gid).call(context.Background(), func() {}); err != nil {
					c.t.Fatal(err)
				}
			}
		}
	}
	idle := func() bool {
		for _, id := range running {
			if !c.nodes[id].lw.idle() || !c.nodes[id].ap.idle() {
				return false
			}
		}
		return true
	}
	testutil.WaitFor(c.t, 5*time.Second, "nodes to settle after a tick", func() bool {
		sync()
		if !idle() {
			return false
		}
		sync()
		return idle()
	})
}

// converged waits until every running node recorded the same sequence for
// gid, of at least min entries, and returns it.
func (c *cluster) converged(gid GroupID, minLen int, timeout time.Duration) []string {
	c.t.Helper()
	var ref []string
	testutil.WaitFor(c.t, timeout, fmt.Sprintf("replicas of group %d to converge", gid), func() bool {
		ref = nil
		first := true
		for _, id := range c.ids {
			n := c.nodes[id]
			if n == nil {
				continue
			}
			got := entriesOf(c.t, n.Group(gid))
			if first {
				ref, first = got, false
				continue
			}
			if !slices.Equal(got, ref) {
				return false
			}
		}
		return len(ref) >= minLen
	})
	return ref
}

// sameDigests waits until every running node has applied gid to the same
// index with the same state digest.
func (c *cluster) sameDigests(gid GroupID, timeout time.Duration) {
	c.t.Helper()
	testutil.WaitFor(c.t, timeout, fmt.Sprintf("equal state digests of group %d", gid), func() bool {
		var ref *Digest
		for _, id := range c.running() {
			d, err := c.nodes[id].Group(gid).StateDigest()
			if err != nil {
				return false
			}
			if ref == nil {
				ref = &d
			} else if d != *ref {
				return false
			}
		}
		return ref != nil
	})
}
