package leadership

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/internal/testutil"
)

// freeGossipAddr returns a 127.0.0.1 port that was free for both TCP and UDP.
func freeGossipAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := tl.Addr().String()
		ul, err := net.ListenPacket("udp", addr)
		tl.Close()
		if err == nil {
			ul.Close()
			return addr
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return ""
}

// startNode starts a member with the local profile, retrying once on a
// fresh port if the one picked was taken meanwhile.
func startNode(t *testing.T, id uint64, key []byte, join ...string) *Membership {
	t.Helper()
	m, _ := startNodeLogs(t, id, key, join...)
	return m
}

// startNodeLogs is startNode, also returning the node's (debug) log.
func startNodeLogs(t *testing.T, id uint64, key []byte, join ...string) (*Membership, *testutil.LockedBuffer) {
	t.Helper()
	logs := &testutil.LockedBuffer{}
	var m *Membership
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		cfg := DefaultLocalConfig()
		cfg.BindAddr = freeGossipAddr(t)
		cfg.Self = NodeInfo{ID: id, NodeAddr: fmt.Sprintf("127.0.0.1:%d", 5000+id), IngressAddr: fmt.Sprintf("127.0.0.1:%d", 8000+id), AdminAddr: fmt.Sprintf("127.0.0.1:%d", 9000+id)}
		cfg.Join = join
		cfg.SecretKey = key
		cfg.Logger = zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
		if m, err = Start(cfg); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start node %d: %v", id, err)
	}
	t.Cleanup(func() {
		m.Close()
		if t.Failed() {
			t.Logf("node %d logs:\n%s", id, tail(logs.String(), 60))
		}
	})
	return m, logs
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func gossipAddr(m *Membership) string { return m.cfg.BindAddr }

func startCluster(t *testing.T) []*Membership {
	n1 := startNode(t, 1, nil)
	n2 := startNode(t, 2, nil, gossipAddr(n1))
	n3 := startNode(t, 3, nil, gossipAddr(n1))
	nodes := []*Membership{n1, n2, n3}
	testutil.WaitFor(t, 10*time.Second, "three alive members on every node", func() bool {
		for _, n := range nodes {
			ms := n.Members()
			if len(ms) != 3 {
				return false
			}
			for i, m := range ms {
				if m.ID != uint64(i+1) || !m.Alive {
					return false
				}
			}
		}
		return true
	})
	return nodes
}

func TestClusterConvergesOnMembersAndLeaders(t *testing.T) {
	nodes := startCluster(t)
	for _, n := range nodes {
		got, ok := n.Node(2)
		want := NodeInfo{ID: 2, NodeAddr: "127.0.0.1:5002", IngressAddr: "127.0.0.1:8002", AdminAddr: "127.0.0.1:9002"}
		if !ok || got.NodeInfo != want {
			t.Fatalf("node %d sees node 2 as %+v, %v; want %+v", n.cfg.Self.ID, got, ok, want)
		}
		if got.GossipAddr != gossipAddr(nodes[1]) {
			t.Fatalf("node %d sees node 2's gossip address as %q, want %q", n.cfg.Self.ID, got.GossipAddr, gossipAddr(nodes[1]))
		}
	}

	start := time.Now()
	nodes[0].SetLocal(1, 1, 3)
	nodes[1].SetLocal(2, 2, 4)
	nodes[2].Hint(3, 1, 2)
	expect := func(want map[uint32]Entry) func() bool {
		return func() bool {
			for _, n := range nodes {
				for p, e := range want {
					leader, term, ok := n.Leader(p)
					if !ok || leader != e.Leader || term != e.Term {
						return false
					}
				}
			}
			return true
		}
	}
	testutil.WaitFor(t, 5*time.Second, "leader table on every node", expect(map[uint32]Entry{1: {1, 3}, 2: {2, 4}, 3: {1, 2}}))
	t.Logf("leader table converged in %v", time.Since(start))

	// A stale (lower-term) entry never overwrites; a newer one spreads.
	nodes[2].SetLocal(1, 3, 2)
	nodes[1].SetLocal(1, 2, 5)
	testutil.WaitFor(t, 5*time.Second, "term 5 leader of partition 1 everywhere", expect(map[uint32]Entry{1: {2, 5}}))
	if leader, term, _ := nodes[2].Leader(1); leader != 2 || term != 5 {
		t.Fatalf("node 3 partition 1: leader %d term %d", leader, term)
	}
}

func TestLeavingNodeIsNotAlive(t *testing.T) {
	nodes := startCluster(t)
	if err := nodes[2].Close(); err != nil {
		t.Fatalf("close node 3: %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, "node 3 not alive on nodes 1 and 2", func() bool {
		for _, n := range nodes[:2] {
			m, ok := n.Node(3)
			if !ok || m.Alive {
				return false
			}
		}
		return true
	})
	if ms := nodes[0].Members(); len(ms) != 3 {
		t.Fatalf("members after leave: %+v (a departed node stays listed, not alive)", ms)
	}
}

func TestWrongSecretKeyCannotJoin(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	other := bytes.Repeat([]byte{2}, 32)
	n1 := startNode(t, 1, key)
	n2 := startNode(t, 2, key, gossipAddr(n1))
	testutil.WaitFor(t, 5*time.Second, "node 2 with the right key to join", func() bool {
		m, ok := n1.Node(2)
		return ok && m.Alive
	})
	intruder := startNode(t, 9, other)
	if _, err := intruder.Join(gossipAddr(n1)); err == nil {
		t.Fatal("join with the wrong key succeeded")
	}
	if _, err := intruder.Join(gossipAddr(n2)); err == nil {
		t.Fatal("join with the wrong key succeeded")
	}
	for _, n := range []*Membership{n1, n2} {
		if _, ok := n.Node(9); ok {
			t.Fatalf("node %d lists the intruder", n.cfg.Self.ID)
		}
	}
	if ms := intruder.Members(); len(ms) != 1 {
		t.Fatalf("intruder sees %+v", ms)
	}
}

// TestRefusedJoinWarnsOnce: a node whose peers refuse it (another gossip
// key) says so at warn level, with the cause, once, while it keeps
// retrying.
func TestRefusedJoinWarnsOnce(t *testing.T) {
	n1 := startNode(t, 1, bytes.Repeat([]byte{1}, 32))
	_, logs := startNodeLogs(t, 9, bytes.Repeat([]byte{2}, 32), gossipAddr(n1))
	count := func(parts ...string) int {
		n := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				n++
			}
		}
		return n
	}
	testutil.WaitFor(t, 10*time.Second, "several refused rejoins", func() bool {
		return count("cannot join gossip members") >= 3
	})
	if warns := count(`"level":"warn"`, "cannot join gossip members"); warns != 1 {
		t.Fatalf("%d warn lines for one lasting cause, want 1:\n%s", warns, logs.String())
	}
}

// TestStartOnABoundListener: Start gossips on a Listener bound beforehand
// and owns it (closed by Close, or by a Start that fails).
func TestStartOnABoundListener(t *testing.T) {
	addr := freeGossipAddr(t)
	l, err := Listen(addr, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(addr, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("second Listen on a bound address: %v", err)
	}
	cfg := DefaultLocalConfig()
	cfg.Self = NodeInfo{ID: 1, NodeAddr: "127.0.0.1:5001"}
	cfg.BindAddr, cfg.Listener = freeGossipAddr(t), l
	if _, err := Start(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Start with a listener on another address: %v", err)
	}
	// The failed Start closed the listener: the address is free again.
	if l, err = Listen(addr, zerolog.Nop()); err != nil {
		t.Fatalf("Listen after a failed Start: %v", err)
	}
	cfg.BindAddr, cfg.Listener = addr, l
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n2 := startNode(t, 2, nil, addr)
	testutil.WaitFor(t, 5*time.Second, "node 2 to join through the bound listener", func() bool {
		mem, ok := m.Node(2)
		return ok && mem.Alive && len(n2.Members()) == 2
	})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Listen(addr, zerolog.Nop())
	if err != nil {
		t.Fatalf("Listen after Close: %v", err)
	}
	l.Close()
}

// TestNodeOutsideVotersIsNotAMember: a node whose id is not one of the
// voters joins gossip, but no voter lists it as a member, takes its
// leadership claims, or logs it more than once.
func TestNodeOutsideVotersIsNotAMember(t *testing.T) {
	voters := []uint64{1, 2}
	start := func(id uint64, join ...string) (*Membership, *testutil.LockedBuffer) {
		t.Helper()
		logs := &testutil.LockedBuffer{}
		cfg := DefaultLocalConfig()
		cfg.BindAddr = freeGossipAddr(t)
		cfg.Self = NodeInfo{ID: id, NodeAddr: fmt.Sprintf("127.0.0.1:%d", 5000+id)}
		cfg.Join = join
		if id != 4 {
			cfg.Voters = voters
		}
		cfg.Logger = zerolog.New(logs).Level(zerolog.DebugLevel)
		m, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			m.Close()
			if t.Failed() {
				t.Logf("node %d logs:\n%s", id, tail(logs.String(), 40))
			}
		})
		return m, logs
	}
	n1, logs1 := start(1)
	n2, _ := start(2, gossipAddr(n1))
	outsider, _ := start(4, gossipAddr(n1))
	// The outsider claims a partition at a term higher than the voters'.
	n1.SetLocal(1, 1, 3)
	outsider.SetLocal(1, 4, 9)

	// The outsider sees everyone (it has no voter list): gossip reached it
	// and it reached the voters.
	testutil.WaitFor(t, 10*time.Second, "the outsider to see both voters", func() bool {
		a, okA := outsider.Node(1)
		b, okB := outsider.Node(2)
		return okA && okB && a.Alive && b.Alive
	})
	testutil.WaitFor(t, 10*time.Second, "node 2 to learn node 1's leadership", func() bool {
		l, term, _ := n2.Leader(1)
		return l == 1 && term == 3
	})
	// A few push/pull rounds (1 s each in the local profile) later, the
	// voters still list only each other and keep their own leader.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range []*Membership{n1, n2} {
			var ids []uint64
			for _, m := range n.Members() {
				ids = append(ids, m.ID)
			}
			if !slices.Equal(ids, voters) {
				t.Fatalf("node %d lists members %v, want %v", n.cfg.Self.ID, ids, voters)
			}
			if l, term, _ := n.Leader(1); l != 1 || term != 3 {
				t.Fatalf("node %d: partition 1 led by %d at term %d, want the voter 1 at term 3", n.cfg.Self.ID, l, term)
			}
		}
		time.Sleep(50 * time.Millisecond) // the condition is "stays so": sample it
	}
	if n := strings.Count(logs1.String(), "ignoring a node that is not a member of the cluster"); n != 1 {
		t.Fatalf("node 1 logged the outsider %d times, want once:\n%s", n, tail(logs1.String(), 40))
	}
}

func TestValidateRefusesSelfOutsideVoters(t *testing.T) {
	cfg := DefaultLocalConfig()
	cfg.Self = NodeInfo{ID: 3, NodeAddr: "127.0.0.1:5003"}
	cfg.Voters = []uint64{1, 2}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
	}
}

// TestZeroConfigTakesDefaults: beside Self, a zero Config is DefaultConfig
// (the convention of docs/architecture.md).
func TestZeroConfigTakesDefaults(t *testing.T) {
	self := NodeInfo{ID: 1, NodeAddr: "127.0.0.1:5001"}
	cfg := Config{Self: self}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	want := DefaultConfig()
	want.Self = self
	got := cfg.withDefaults()
	got.Logger, want.Logger = zerolog.Nop(), zerolog.Nop()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("zero config with defaults:\n%+v\nwant DefaultConfig:\n%+v", got, want)
	}
}
