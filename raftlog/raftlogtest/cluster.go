// Package raftlogtest runs real raftlog nodes in one process, for the tests
// of the state machines above raftlog: each node has its own write-ahead log
// and state file in a temporary directory and its own applier, and the nodes
// talk over a raftlog.MemNetwork. Raft time is manual (Knobs.ManualTicks):
// nobody campaigns until the test elects a node (Elect), and the cluster
// ticks only a leader, to replicate, so leadership moves only when the test
// moves it. A test may also hold commits (HoldCommits) to see what a state
// machine does while its entries are appended but not yet committed.
package raftlogtest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/raftlog"
)

// Options configure a Cluster.
type Options struct {
	// Nodes is the number of nodes, each a voter of the group (at least 1).
	Nodes int
	// Group is the group every node runs; zero is group 1.
	Group raftlog.GroupID
	// StateMachine returns node i's state machine for the group.
	StateMachine func(i int) raftlog.StateMachine
	// Watch, when set, receives node i's leadership events (Node.Watch).
	Watch func(i int, ev raftlog.LeaderEvent)
	// Tune, when set, adjusts node i's configuration before it opens.
	Tune func(i int, cfg *raftlog.Config)
	// Seed seeds the network's random faults (Net.SetFaults).
	Seed uint64
}

// Cluster is a group replicated on Options.Nodes nodes, indexed from 0;
// node i has raftlog node id i+1. Its methods are safe for concurrent use.
type Cluster struct {
	// Net is the network between the nodes. Its interceptor belongs to the
	// Cluster (HoldCommits, Appended).
	Net *raftlog.MemNetwork

	tb     testing.TB
	group  raftlog.GroupID
	nodes  []*raftlog.Node
	groups []*raftlog.Group

	mu sync.Mutex
	// Guarded by mu.
	hold    bool
	limit   uint64          // with hold: the highest index a follower may acknowledge
	log     []raftlog.Entry // entries the leaders replicated, from index base
	base    uint64
	elected int // the node Elect made leader last, -1 before
}

// New starts the cluster; the test's cleanup closes it.
func New(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Nodes < 1 || opts.StateMachine == nil {
		tb.Fatal("raftlogtest: Options need Nodes and StateMachine")
	}
	if opts.Group == 0 {
		opts.Group = 1
	}
	c := &Cluster{Net: raftlog.NewMemNetwork(opts.Seed), tb: tb, group: opts.Group, elected: -1}
	c.Net.Intercept(c.intercept)
	peers := make(map[uint64]string)
	voters := make([]uint64, opts.Nodes)
	for i := range opts.Nodes {
		voters[i] = c.NodeID(i)
		peers[c.NodeID(i)] = fmt.Sprintf("mem-%d", c.NodeID(i))
	}
	tb.Cleanup(c.close)
	for i := range opts.Nodes {
		cfg := raftlog.Config{
			NodeID:         c.NodeID(i),
			DataDir:        tb.TempDir(),
			Peers:          peers,
			TickInterval:   10 * time.Millisecond,
			ElectionTicks:  10,
			HeartbeatTicks: 1,
			Logger:         zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel).With().Int("node", i).Logger(),
			Knobs:          &raftlog.Knobs{ManualTicks: true, Network: c.Net},
		}
		if opts.Tune != nil {
			opts.Tune(i, &cfg)
		}
		n, err := raftlog.Open(cfg)
		if err != nil {
			tb.Fatalf("raftlogtest: open node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, n)
		if opts.Watch != nil {
			n.Watch(func(ev raftlog.LeaderEvent) { opts.Watch(i, ev) })
		}
		g, err := n.AddGroup(opts.Group, voters, opts.StateMachine(i))
		if err != nil {
			tb.Fatalf("raftlogtest: node %d: add group %d: %v", i, opts.Group, err)
		}
		c.groups = append(c.groups, g)
	}
	return c
}

func (c *Cluster) close() {
	for i, n := range c.nodes {
		if err := n.Close(); err != nil {
			c.tb.Errorf("raftlogtest: close node %d: %v", i, err)
		}
	}
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// NodeID is node i's raftlog node id.
func (c *Cluster) NodeID(i int) uint64 { return uint64(i + 1) }

// Node is node i.
func (c *Cluster) Node(i int) *raftlog.Node { return c.nodes[i] }

// Group is the group on node i.
func (c *Cluster) Group(i int) *raftlog.Group { return c.groups[i] }

// Tick advances the Raft clock of the given nodes by one tick.
func (c *Cluster) Tick(nodes ...int) {
	for _, i := range nodes {
		c.nodes[i].Tick()
	}
}

// Leader returns the node that leads in the highest term any node knows,
// -1 for none.
func (c *Cluster) Leader() int {
	lead, term := -1, uint64(0)
	for i, g := range c.groups {
		if st := g.Status(); st.IsLeader && st.Term >= term {
			lead, term = i, st.Term
		}
	}
	return lead
}

// Elect makes node i the leader in a new term, even if it leads already:
// it forges the MsgTimeoutNow a leadership transfer sends, so the voters
// grant i their votes if its log is up to date, whoever led. A leader that
// cannot hear the election keeps believing it leads an older term. Elect
// returns once i leads.
func (c *Cluster) Elect(i int) {
	c.tb.Helper()
	if len(c.nodes) == 1 {
		// A lone voter elects itself when its group opens.
		c.waitFor(fmt.Sprintf("node %d to lead", i), func() bool { return c.groups[i].Status().IsLeader })
		c.setElected(i)
		return
	}
	st := c.groups[i].Status()
	if st.IsLeader {
		// A leader ignores MsgTimeoutNow: pass leadership through another
		// voter and back.
		c.Elect((i + 1) % len(c.nodes))
		st = c.groups[i].Status()
	}
	// The voters refuse i when its log lags theirs (the leader may append
	// between catchUp and the vote), and with manual ticks nobody would
	// campaign again: then every node is ticked until the group has a
	// leader, and i tries again.
	for attempt := 1; ; attempt++ {
		c.catchUp(i)
		st = c.groups[i].Status()
		from := st.Membership.Voters[0]
		if from == st.Replica {
			from = st.Membership.Voters[1]
		}
		m := &pb.Message{Type: pb.MsgTimeoutNow.Enum(), From: &from, To: &st.Replica, Term: &st.Term}
		if !c.Net.Inject(c.NodeID(i), c.group, m) {
			c.tb.Fatalf("raftlogtest: node %d refused the forged MsgTimeoutNow", i)
		}
		won := poll(2*time.Second, func() bool {
			now := c.groups[i].Status()
			return now.IsLeader && now.Term > st.Term
		})
		if won {
			break
		}
		if attempt == 10 {
			c.tb.Fatalf("raftlogtest: node %d did not win an election in %d attempts", i, attempt)
		}
		all := make([]int, len(c.nodes))
		for k := range all {
			all[k] = k
		}
		c.waitFor("a leader after a refused election", func() bool {
			c.Tick(all...)
			lead := c.Leader()
			return lead >= 0 && c.groups[lead].Status().Term > st.Term
		})
	}
	c.setElected(i)
}

// catchUp waits, ticking the leader, until node i acknowledged all the
// leader's log, so that the voters grant it their votes: an entry that
// committed on the others alone would make them refuse, and with manual
// ticks nobody would campaign again. With commits held, acknowledgements
// stop at the hold, and i is taken as it is.
func (c *Cluster) catchUp(i int) {
	lead := c.Leader()
	c.mu.Lock()
	hold, target := c.hold, c.base+uint64(len(c.log))
	if len(c.log) > 0 {
		target--
	}
	c.mu.Unlock()
	if lead < 0 || lead == i || hold {
		return
	}
	node := c.NodeID(i)
	c.waitFor(fmt.Sprintf("node %d to hold the leader's log", i), func() bool {
		c.Tick(lead)
		st := c.groups[lead].Status()
		// A leader ticked alone can step down (CheckQuorum, when its
		// followers' answers lag its ticks on a loaded machine): then
		// Elect's retries take over.
		return !st.IsLeader || st.Match[node] >= target
	})
}

// poll reports whether cond held within d, looking every millisecond.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func (c *Cluster) setElected(i int) {
	c.mu.Lock()
	c.elected = i
	c.mu.Unlock()
}

// HoldCommits lets followers acknowledge the group's log up to index at
// most (their acknowledgements say no more), so the leader commits no entry
// beyond it, while it still appends and replicates. A lone voter commits
// on its own and cannot be held. Called again, it moves the limit.
func (c *Cluster) HoldCommits(index uint64) {
	c.mu.Lock()
	c.hold, c.limit = true, index
	c.mu.Unlock()
	c.nudge()
}

// ReleaseCommits ends HoldCommits.
func (c *Cluster) ReleaseCommits() {
	c.mu.Lock()
	c.hold = false
	c.mu.Unlock()
	c.nudge()
}

// nudge ticks the leader to a heartbeat, whose answers make it ask the
// followers to acknowledge again (after HoldCommits moved).
func (c *Cluster) nudge() {
	if lead := c.Leader(); lead >= 0 {
		c.Tick(lead)
	}
}

// Appended returns the entries with data that leaders replicated, in log
// order, as the followers last saw them (an entry a new leader overwrote
// is gone). A lone voter replicates nothing.
func (c *Cluster) Appended() []raftlog.Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []raftlog.Entry
	for _, e := range c.log {
		if e.Data != nil {
			out = append(out, e)
		}
	}
	return out
}

// intercept records replicated entries and applies HoldCommits.
func (c *Cluster) intercept(_ uint64, group raftlog.GroupID, m *pb.Message) bool {
	if group != c.group {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.GetType() {
	case pb.MsgApp:
		for _, e := range m.GetEntries() {
			idx := e.GetIndex()
			if len(c.log) == 0 {
				c.base = idx // the log before it was bootstrapped or compacted
			}
			if idx < c.base || idx > c.base+uint64(len(c.log)) {
				continue // older than the first entry seen, or a gap the follower rejects
			}
			at := int(idx - c.base)
			if at < len(c.log) && c.log[at].Term == e.GetTerm() {
				continue
			}
			c.log = c.log[:at]
			re := raftlog.Entry{Index: idx, Term: e.GetTerm()}
			if e.GetType() == pb.EntryNormal && len(e.GetData()) > 0 {
				re.Data = append([]byte(nil), e.GetData()...)
			}
			c.log = append(c.log, re)
		}
	case pb.MsgAppResp:
		if c.hold && !m.GetReject() && m.GetIndex() > c.limit {
			limit := c.limit
			m.Index = &limit
		}
	}
	return true
}

// WaitApplied waits until the node Elect made leader last committed every
// entry replicated so far (up to HoldCommits' limit) and the given nodes
// applied everything it committed. It ticks that leader meanwhile, so that
// it replicates to followers that missed messages.
func (c *Cluster) WaitApplied(nodes ...int) {
	c.tb.Helper()
	c.mu.Lock()
	lead, target := c.elected, c.base+uint64(len(c.log))
	if len(c.log) > 0 {
		target--
	}
	if c.hold {
		target = min(target, c.limit)
	}
	c.mu.Unlock()
	if lead < 0 {
		lead = c.Leader()
	}
	if lead < 0 {
		return
	}
	c.waitFor("nodes to apply the leader's commits", func() bool {
		c.Tick(lead)
		committed := c.groups[lead].Status().Committed
		if committed < target {
			return false
		}
		for _, i := range nodes {
			if c.groups[i].Status().Applied < committed {
				return false
			}
		}
		return true
	})
}

func (c *Cluster) waitFor(what string, cond func() bool) {
	c.tb.Helper()
	// Generous: a loaded machine under -race applies slowly.
	testutil.WaitFor(c.tb, 20*time.Second, what, cond)
}
