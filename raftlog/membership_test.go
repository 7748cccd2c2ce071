package raftlog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/internal/testutil"
)

// retryableConf says whether a configuration step may simply be tried
// again (on the leader of the moment).
func retryableConf(err error) bool {
	var nl *NotLeaderError
	return errors.As(err, &nl) || errors.Is(err, ErrProposalDropped) || errors.Is(err, ErrNotCaughtUp) || errors.Is(err, errFailpoint) ||
		errors.Is(err, ErrConfigChanged) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrStopped)
}

// errFailpoint is what the tests' failpoints return.
var errFailpoint = errors.New("failpoint")

// confStep runs step on whichever of groups() leads, with the
// configuration it applied, until it succeeds.
func confStep(t *testing.T, what string, groups func() []*Group, step func(g *Group, m Membership) (Membership, error)) Membership {
	t.Helper()
	var got Membership
	var last error
	testutil.WaitFor(t, 30*time.Second, what, func() bool {
		for _, g := range groups() {
			if !g.leaderEvent().IsSelf {
				continue
			}
			m, err := step(g, g.Membership())
			if err == nil {
				got = m
				return true
			}
			if !retryableConf(err) {
				t.Fatalf("%s: %v", what, err)
			}
			if !errors.Is(err, last) {
				t.Logf("%s: %v (retrying)", what, err)
			}
			last = err
		}
		return false
	})
	return got
}

func stepCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 3*time.Second)
}

func (c *cluster) groupsOf(gid GroupID) func() []*Group {
	return func() []*Group {
		var out []*Group
		for _, id := range c.running() {
			if g := c.nodes[id].Group(gid); g != nil {
				out = append(out, g)
			}
		}
		return out
	}
}

// addNode starts node id, which joins every group as replica r, after
// telling the running nodes its address.
func (c *cluster) addNode(id, r uint64) {
	c.t.Helper()
	if !slices.Contains(c.ids, id) {
		c.ids = append(c.ids, id)
		c.dirs[id] = c.t.TempDir()
	}
	for _, o := range c.running() {
		if err := c.nodes[o].SetPeer(id, fmt.Sprintf("mem-%d", id)); err != nil {
			c.t.Fatal(err)
		}
	}
	c.replicas[id] = r
	c.start(id)
}

// writer proposes distinct entries to group 1 on whichever node leads it
// and records those acknowledged: applied on that node while it still
// led in the term it appended them in, so they are committed.
type writer struct {
	nodes atomic.Pointer[[]*Node]
	mu    sync.Mutex
	acked []string
	stop  chan struct{}
	done  chan struct{}
}

func startWriter(nodes []*Node) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	w.nodes.Store(&nodes)
	go w.run()
	return w
}

func (w *writer) setNodes(nodes []*Node) { w.nodes.Store(&nodes) }

func (w *writer) run() {
	defer close(w.done)
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		default:
		}
		data := fmt.Sprintf("w%d", i)
		for _, n := range *w.nodes.Load() {
			g := n.Group(1)
			if g == nil || !g.leaderEvent().IsSelf {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			p, err := g.Propose(ctx, []byte(data))
			for err == nil && g.applied.Load() < p.Index && ctx.Err() == nil && !g.stopped() {
				time.Sleep(time.Millisecond) // polls a condition with ctx's deadline
			}
			cancel()
			if ev := g.leaderEvent(); err == nil && g.applied.Load() >= p.Index && ev.IsSelf && ev.Term == p.Term {
				w.mu.Lock()
				w.acked = append(w.acked, data)
				w.mu.Unlock()
			}
			break
		}
	}
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writer) finish() []string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked)
}

// TestMembershipReplaceVoterUnderLoad: under a stream of writes, a fourth
// node joins a three-replica group as a learner, catches up by snapshot
// (the leader's log is compacted), is promoted through a joint
// configuration that demotes the leader's own replica (leadership moves
// first), and the demoted replica is removed. Every acknowledged write is
// on the final configuration, whose replicas converge.
func TestMembershipReplaceVoterUnderLoad(t *testing.T) {
	seed := testSeed(t)
	c := newCluster(t, seed, 3, []GroupID{1}, func(cfg *Config) {
		cfg.SnapshotEntries, cfg.SnapshotCatchUpEntries = 200, 50
		cfg.CheckpointInterval = 20 * time.Millisecond
	})
	c.nw.SetFaults(1, 2*time.Millisecond)
	lead := c.leader(1, c.ids, 10*time.Second)
	w := startWriter([]*Node{c.nodes[1], c.nodes[2], c.nodes[3]})
	testutil.WaitFor(t, 30*time.Second, "400 acknowledged writes", func() bool { return w.count() >= 400 })
	// Compaction follows a checkpoint: wait until every log dropped its
	// start, so that node 4 can only catch up by snapshot.
	testutil.WaitFor(t, 30*time.Second, "the replicas' logs to be compacted", func() bool {
		for _, id := range c.ids {
			if c.nodes[id].wal.FirstIndex(1) <= 2 {
				return false
			}
		}
		return true
	})

	r4 := ReplicaID(4, 0)
	c.addNode(4, r4)
	w.setNodes([]*Node{c.nodes[1], c.nodes[2], c.nodes[3], c.nodes[4]})
	m := confStep(t, "add learner 4", c.groupsOf(1), func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.AddLearner(ctx, m, r4)
	})
	if !slices.Contains(m.Learners, r4) {
		t.Fatalf("after AddLearner: %v", m)
	}
	// Its log starts past the compacted start once the snapshot's record
	// is written, just after the install.
	testutil.WaitFor(t, 30*time.Second, "node 4 to install a snapshot (its log starting past index 2) and learn it is a learner", func() bool {
		return c.nodes[4].Group(1).Membership().Contains(r4) && c.nodes[4].wal.FirstIndex(1) > 2
	})

	// Replace the leader's replica: Promote moves the leadership first.
	victim := lead
	rv := ReplicaID(victim, 0)
	m = confStep(t, "promote 4, demote the leader", c.groupsOf(1), func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.Promote(ctx, m, r4, rv)
	})
	if !m.Joint() || m.Role(r4) != "incoming" || m.Role(rv) != "outgoing" {
		t.Fatalf("after Promote: %v (roles %q, %q)", m, m.Role(r4), m.Role(rv))
	}
	if ev := c.nodes[victim].Group(1).leaderEvent(); ev.IsSelf {
		t.Fatalf("the demoted replica still leads")
	}
	m = confStep(t, "leave joint", c.groupsOf(1), func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.LeaveJoint(ctx, m)
	})
	m = confStep(t, "remove the demoted replica", c.groupsOf(1), func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.RemoveReplica(ctx, m, rv)
	})
	want := []uint64{}
	for _, id := range []uint64{1, 2, 3, 4} {
		if id != victim {
			want = append(want, id)
		}
	}
	if m.Joint() || len(m.Learners) > 0 || !slices.Equal(m.voterNodes(), want) {
		t.Fatalf("final configuration %v, want voters on %v", m, want)
	}
	acked := w.finish()
	c.nw.Heal()
	c.stop(victim)
	got := c.converged(1, len(acked), 30*time.Second)
	have := map[string]bool{}
	for _, e := range got {
		have[e] = true
	}
	for _, a := range acked {
		if !have[a] {
			t.Fatalf("acknowledged write %q is missing from the final configuration (%d acknowledged, %d present)", a, len(acked), len(got))
		}
	}
	c.sameDigests(1, 10*time.Second)
	for _, id := range c.running() {
		if got := c.nodes[id].Group(1).Membership(); !got.Equal(m) {
			t.Fatalf("node %d applied %v, want %v", id, got, m)
		}
	}
	t.Logf("%d acknowledged writes; node 4 caught up by snapshot", len(acked))
}

// confAt reads the configuration and applied index node n's state.db
// holds for group gid.
func confAt(t *testing.T, n *Node, gid GroupID) (Membership, uint64) {
	t.Helper()
	var gs groupState
	err := n.db.View(func(tx *bolt.Tx) error {
		gb, err := openGroupBuckets(tx, gid)
		if err == nil {
			gs, err = readGroupState(gb)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return membershipOf(gs.conf), gs.appliedIdx
}

// confEntries lists the configuration change entries in node n's log of
// gid: index and the configuration each leads to, from the one before.
func confEntries(t *testing.T, n *Node, gid GroupID, from Membership) map[uint64]Membership {
	t.Helper()
	out := map[uint64]Membership{}
	first, last := n.wal.FirstIndex(uint32(gid)), n.wal.LastIndex(uint32(gid))
	ents, err := n.wal.Entries(uint32(gid), first, last+1, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	cur := from.confState()
	for _, e := range ents {
		if e.GetType() != pb.EntryConfChangeV2 {
			continue
		}
		cc := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			t.Fatal(err)
		}
		if next, err := nextConf(cur, cc); err == nil {
			cur = next
		}
		out[e.GetIndex()] = membershipOf(cur)
	}
	return out
}

// TestConfChangeSurvivesCrashAtEachStep: a follower "crashes" at each
// named step of a replacement (its checkpoint fails, as a kill before it
// would, or its group stops right after it) and restarts on its data: the
// configuration in its state.db is the one its applied index implies
// (never one without the other), and the group finishes the replacement
// with every replica agreeing.
func TestConfChangeSurvivesCrashAtEachStep(t *testing.T) {
	for _, point := range []string{
		"applied-add-learner", "after-add-learner",
		"applied-enter-joint", "after-enter-joint",
		"applied-leave-joint", "after-leave-joint",
		"applied-remove", "after-remove",
	} {
		t.Run(point, func(t *testing.T) { testCrashAtConfStep(t, point) })
	}
}

func testCrashAtConfStep(t *testing.T, point string) {
	seed := testSeed(t)
	var victim atomic.Uint64
	var hit atomic.Bool
	var refusedBefore atomic.Int32
	c := newCluster(t, seed, 3, []GroupID{1}, func(cfg *Config) {
		id := cfg.NodeID
		cfg.CheckpointInterval = time.Hour // only forced checkpoints
		cfg.Knobs = &Knobs{AtConfChange: func(_ GroupID, p string) error {
			if p == "before-remove" && refusedBefore.Add(1) == 1 {
				return fmt.Errorf("%w before-remove", errFailpoint)
			}
			if p == point && id == victim.Load() && hit.CompareAndSwap(false, true) {
				return fmt.Errorf("%w %s", errFailpoint, p)
			}
			return nil
		}}
	})
	lead := c.leader(1, c.ids, 10*time.Second)
	var v, other uint64
	for _, id := range c.ids {
		switch {
		case id == lead:
		case v == 0:
			v = id
		default:
			other = id
		}
	}
	victim.Store(v)
	for i := range 20 {
		if err := c.proposeAnywhere(1, fmt.Sprintf("e%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	initial := c.nodes[lead].Group(1).Membership()
	r4, ro := ReplicaID(4, 0), ReplicaID(other, 0)
	c.addNode(4, r4)

	// crashed restarts the victim if its failpoint stopped it, and checks
	// what its state.db holds.
	restarted := false
	restartIfCrashed := func(m Membership) {
		t.Helper()
		if restarted {
			return
		}
		testutil.WaitFor(t, 10*time.Second, "the victim to apply the step or hit its failpoint", func() bool {
			return hit.Load() || c.nodes[v].Group(1).Membership().Equal(m)
		})
		if !hit.Load() {
			return
		}
		restarted = true
		g := c.nodes[v].Group(1)
		testutil.WaitFor(t, 10*time.Second, "the victim to stop at its failpoint", g.stopped)
		c.stop(v)
		n, err := open(c.config(v), c.nw.transportFor)
		if err != nil {
			t.Fatal(err)
		}
		conf, applied := confAt(t, n, 1)
		steps := confEntries(t, n, 1, initial)
		var expect Membership = initial
		var lastIdx uint64
		for idx, m := range steps {
			if idx <= applied && idx > lastIdx {
				expect, lastIdx = m, idx
			}
		}
		if !conf.Equal(expect) {
			t.Fatalf("after the crash at %s: state.db holds %v at applied index %d, the log says %v", point, conf, applied, expect)
		}
		t.Logf("crash at %s: state.db at applied %d holds %v", point, applied, conf)
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		c.start(v)
	}
	groups := c.groupsOf(1)
	m := confStep(t, "add learner", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.AddLearner(ctx, m, r4)
	})
	restartIfCrashed(m)
	m = confStep(t, "promote", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.Promote(ctx, m, r4, ro)
	})
	restartIfCrashed(m)
	m = confStep(t, "leave joint", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.LeaveJoint(ctx, m)
	})
	restartIfCrashed(m)
	final := confStep(t, "remove", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.RemoveReplica(ctx, m, ro)
	})
	restartIfCrashed(final)
	if !hit.Load() {
		t.Fatalf("failpoint %s was never hit", point)
	}
	if refusedBefore.Load() < 2 {
		t.Fatalf("before-remove hit %d times, want a refusal then a retry", refusedBefore.Load())
	}
	c.stop(other)
	if err := c.proposeAnywhere(1, "after"); err != nil {
		t.Fatal(err)
	}
	c.converged(1, 21, 20*time.Second)
	for _, id := range c.running() {
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("node %d to apply the final configuration", id), func() bool {
			return c.nodes[id].Group(1).Membership().Equal(final)
		})
	}
}

// TestRemovedReplicaIsToldAndDoesNotDisrupt: a replica removed from the
// group while its node was down, the node then added back under a new
// replica id (a new generation: ids are never reused), restarted on its
// old data, gets the "removed" answer: its group stops with Removed
// closed, and the group's leader and term stay as they were.
func TestRemovedReplicaIsToldAndDoesNotDisrupt(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, nil)
	c.leader(1, c.ids, 10*time.Second)
	for i := range 10 {
		if err := c.proposeAnywhere(1, fmt.Sprintf("e%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The zombie: node 3's data as it was while a voter.
	lead := c.leader(1, c.ids, 10*time.Second)
	zombie := uint64(3)
	if lead == zombie {
		zombie = 2
	}
	oldDir := c.dirs[zombie]
	c.stop(zombie)
	groups := c.groupsOf(1)
	old := ReplicaID(zombie, 0)
	confStep(t, "remove the down replica", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.RemoveReplica(ctx, m, old)
	})
	// The node comes back empty, as generation 1.
	c.dirs[zombie] = t.TempDir()
	r := ReplicaID(zombie, 1)
	c.replicas[zombie] = r
	c.start(zombie)
	confStep(t, "add the new replica as a learner", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.AddLearner(ctx, m, r)
	})
	// Old replica ids are refused: the group never reuses them.
	if _, err := func() (Membership, error) {
		g := c.nodes[c.leader(1, c.running(), 10*time.Second)].Group(1)
		ctx, cancel := stepCtx()
		defer cancel()
		return g.AddLearner(ctx, g.Membership(), old)
	}(); !errors.Is(err, ErrConfChangeRefused) {
		t.Fatalf("adding the old replica id back: %v, want ErrConfChangeRefused", err)
	}
	confStep(t, "promote it", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.Promote(ctx, m, r, 0)
	})
	final := confStep(t, "leave joint", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.LeaveJoint(ctx, m)
	})
	if !slices.Contains(final.Voters, r) || final.Contains(old) {
		t.Fatalf("final %v", final)
	}
	if err := c.proposeAnywhere(1, "before-zombie"); err != nil {
		t.Fatal(err)
	}
	lead = c.leader(1, c.running(), 10*time.Second)
	term := c.nodes[lead].Group(1).leaderEvent().Term

	// Swap the new incarnation for the zombie on its old data.
	c.stop(zombie)
	c.dirs[zombie] = oldDir
	delete(c.replicas, zombie)
	c.start(zombie)
	zg := c.nodes[zombie].Group(1)
	if got := zg.Status().Replica; got != old {
		t.Fatalf("zombie runs replica %#x, want %#x", got, old)
	}
	// Raft time passes: the zombie, a voter in its own eyes, campaigns.
	testutil.WaitFor(t, 20*time.Second, "the zombie to hear it was removed", func() bool {
		select {
		case <-zg.Removed():
			return true
		default:
			return false
		}
	})
	select {
	case err := <-c.nodes[zombie].Failed():
		t.Fatalf("a removed replica is not a node failure: %v", err)
	default:
	}
	if ev := c.nodes[lead].Group(1).leaderEvent(); !ev.IsSelf || ev.Term != term {
		t.Fatalf("the group was disrupted: leader %d term %d, was %d term %d", ev.Leader, ev.Term, lead, term)
	}
	c.stop(zombie)
	if err := c.proposeAnywhere(1, "after-zombie"); err != nil {
		t.Fatal(err)
	}
}

// TestNextConfIsRaftsAndCompareAndSwap: the applier's computation refuses
// what raft would panic on, and a change whose expected configuration is
// not the applied one changes nothing.
func TestNextConfIsRaftsAndCompareAndSwap(t *testing.T) {
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	if _, err := nextConf(cs, &pb.ConfChangeV2{}); !errors.Is(err, ErrConfChangeRefused) {
		t.Fatalf("leave joint outside one: %v", err)
	}
	if _, err := nextConf(&pb.ConfState{Voters: []uint64{1}}, singleChange(pb.ConfChangeRemoveNode, 1)); !errors.Is(err, ErrConfChangeRefused) {
		t.Fatalf("removing the last voter: %v", err)
	}
	next, err := nextConf(cs, singleChange(pb.ConfChangeAddLearnerNode, ReplicaID(4, 1)))
	if err != nil || !slices.Equal(next.GetLearners(), []uint64{ReplicaID(4, 1)}) {
		t.Fatalf("add learner: %v %v", next, err)
	}
	db, err := bolt.Open(t.TempDir()+"/s.db", 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := putConf(meta, cs); err != nil {
			return err
		}
		stale, _ := proto.Marshal(&pb.ConfState{Voters: []uint64{1, 2}})
		cc := singleChange(pb.ConfChangeAddLearnerNode, 4)
		cc.Context = stale
		data, _ := proto.Marshal(cc)
		res, err := applyConfChange(meta, &pb.Entry{Type: pb.EntryConfChangeV2.Enum(), Index: new(uint64(7)), Term: new(uint64(2)), Data: data})
		if err != nil || res.next != nil || !errors.Is(res.err, ErrConfigChanged) {
			t.Fatalf("stale expectation: %+v %v", res, err)
		}
		if have := (&pb.ConfState{}); proto.Unmarshal(meta.Get(keyConf), have) != nil || !membershipOf(have).Equal(membershipOf(cs)) {
			t.Fatalf("a refused change changed the configuration to %v", have)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if NodeOf(ReplicaID(7, 3)) != 7 || GenerationOf(ReplicaID(7, 3)) != 3 || ReplicaID(7, 0) != 7 {
		t.Fatal("replica id round trip")
	}
}

// TestGRPCReplaceNodeAndRefuseRemovedNode: over real gRPC, a node that
// was never in the startup peers joins (the others learn its address with
// SetPeer), is added as a learner, caught up by snapshot, and replaces
// node 3, which is down. Node 3 is then removed from the address books;
// restarted on its old data, it gets the "removed" answer on the wire and
// stops its group, and the group keeps its leader and term.
func TestGRPCReplaceNodeAndRefuseRemovedNode(t *testing.T) {
	c := newGRPCCluster(t, 3, []GroupID{1}, func(cfg *Config) {
		cfg.SnapshotEntries, cfg.SnapshotCatchUpEntries = 20, 5
		cfg.CheckpointInterval = 10 * time.Millisecond
	})
	groups := func() []*Group {
		var out []*Group
		for _, n := range c.nodes {
			out = append(out, n.Group(1))
		}
		return out
	}
	propose := func(data string) {
		t.Helper()
		confStep(t, "propose "+data, groups, func(g *Group, m Membership) (Membership, error) {
			ctx, cancel := stepCtx()
			defer cancel()
			_, err := g.Propose(ctx, []byte(data))
			return m, err
		})
	}
	for i := range 50 {
		propose(fmt.Sprintf("e%d", i))
	}
	lead := c.leader(t, 1, 10*time.Second)
	gone := uint64(3)
	if lead == gone {
		gone = 2
	}
	c.stop(gone)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r4 := ReplicaID(4, 0)
	c.ids = append(c.ids, 4)
	c.peers[4], c.dirs[4], c.replicas[4] = l.Addr().String(), t.TempDir(), r4
	for _, n := range c.nodes {
		if err := n.SetPeer(4, c.peers[4]); err != nil {
			t.Fatal(err)
		}
	}
	c.start(4, l)
	rg := ReplicaID(gone, 0)
	confStep(t, "add learner 4", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.AddLearner(ctx, m, r4)
	})
	confStep(t, "promote 4, demote the down node", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.Promote(ctx, m, r4, rg)
	})
	confStep(t, "leave joint", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.LeaveJoint(ctx, m)
	})
	final := confStep(t, "remove the down node", groups, func(g *Group, m Membership) (Membership, error) {
		ctx, cancel := stepCtx()
		defer cancel()
		return g.RemoveReplica(ctx, m, rg)
	})
	if final.Contains(rg) || !slices.Contains(final.Voters, r4) {
		t.Fatalf("final %v", final)
	}
	if first := c.nodes[4].wal.FirstIndex(1); first <= 2 {
		t.Fatalf("node 4's log starts at %d: it did not catch up by snapshot", first)
	}
	for _, n := range c.nodes {
		n.RemovePeer(gone)
	}
	propose("before-zombie")
	lead = c.leader(t, 1, 10*time.Second)
	term := c.nodes[lead].Group(1).leaderEvent().Term

	c.start(gone, nil)
	zg := c.nodes[gone].Group(1)
	testutil.WaitFor(t, 20*time.Second, "the removed node to hear it was removed", func() bool {
		select {
		case <-zg.Removed():
			return true
		default:
			return false
		}
	})
	if ev := c.nodes[lead].Group(1).leaderEvent(); !ev.IsSelf || ev.Term != term {
		t.Fatalf("the group was disrupted: leader %d term %d, was %d term %d", ev.Leader, ev.Term, lead, term)
	}
	c.stop(gone)
	propose("after-zombie")
}
