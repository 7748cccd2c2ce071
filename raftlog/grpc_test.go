package raftlog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftgate/raftgate/raftlog/raftlogpb"
)

// TestGRPCThreeNodes runs three nodes over real gRPC on 127.0.0.1 with
// fsync'd bbolt files: replication of three groups, ReadIndex, leadership
// transfer, TransferAll and Watch.
func TestGRPCThreeNodes(t *testing.T) {
	groups := []GroupID{MetaGroup, 1, 2}
	c := newGRPCCluster(t, 3, groups, func(cfg *Config) {
		cfg.TickInterval = 20 * time.Millisecond
	})
	var mu sync.Mutex
	events := map[GroupID][]LeaderEvent{}
	cancel := c.nodes[1].Watch(func(ev LeaderEvent) {
		mu.Lock()
		events[ev.Group] = append(events[ev.Group], ev)
		mu.Unlock()
	})
	defer cancel()

	for _, gid := range groups {
		lead := c.leader(t, gid, 10*time.Second)
		g := c.nodes[lead].Group(gid)
		var last Proposal
		for i := range 50 {
			p, err := g.Propose(context.Background(), []byte(fmt.Sprintf("g%d-%d", gid, i)))
			if err != nil {
				t.Fatal(err)
			}
			last = p
		}
		testutil.WaitFor(t, 10*time.Second, "all replicas to apply", func() bool {
			for _, id := range c.ids {
				if c.sms[id][gid].appliedIndex() < last.Index {
					return false
				}
			}
			return true
		})
		ref := entriesOf(t, g)
		for _, id := range c.ids {
			if got := entriesOf(t, c.nodes[id].Group(gid)); !slices.Equal(got, ref) || len(got) != 50 {
				t.Fatalf("node %d group %d recorded %d entries, differs from leader", id, gid, len(got))
			}
		}
		if err := g.ReadIndex(context.Background()); err != nil {
			t.Fatalf("ReadIndex: %v", err)
		}
	}

	// Transfer group 1 to a chosen follower.
	lead := c.leader(t, 1, 5*time.Second)
	to := c.ids[0]
	if to == lead {
		to = c.ids[1]
	}
	ctx, cancelCtx := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelCtx()
	if err := c.nodes[lead].Group(1).TransferLeadership(ctx, to); err != nil {
		t.Fatalf("TransferLeadership: %v", err)
	}
	if got := c.leader(t, 1, 5*time.Second); got != to {
		t.Fatalf("leader after transfer = %d, want %d", got, to)
	}

	// TransferAll empties node 1 of leaderships.
	if err := c.nodes[1].TransferAll(ctx); err != nil {
		t.Fatalf("TransferAll: %v", err)
	}
	for _, gid := range groups {
		if c.nodes[1].Group(gid).leaderEvent().IsSelf {
			t.Fatalf("node 1 still leads group %d", gid)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "watch events for every group", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, gid := range groups {
			evs := events[gid]
			if len(evs) == 0 || evs[len(evs)-1].Leader == 0 || evs[len(evs)-1].IsSelf {
				return false
			}
		}
		return true
	})
}

// TestGRPCRefusesStrangers: a batch from a node that is not a voter, or
// addressed to another node, is refused.
func TestGRPCRefusesStrangers(t *testing.T) {
	c := newGRPCCluster(t, 3, []GroupID{1}, nil)
	conn, err := grpc.NewClient(c.nodes[1].cfg.Peers[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tc := range []struct{ from, to uint64 }{{99, 1}, {2, 3}} {
		stream, err := raftlogpb.NewRaftClient(conn).Send(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(&raftlogpb.RaftBatch{From: tc.from, To: tc.to})
		_, err = stream.CloseAndRecv()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("batch from %d to %d: %v, want PermissionDenied", tc.from, tc.to, err)
		}
	}
}

// TestGRPCSnapshotCatchUp: a follower that was down while the log was
// compacted catches up through the chunked Raft.Snapshot stream.
func TestGRPCSnapshotCatchUp(t *testing.T) {
	c := newGRPCCluster(t, 3, []GroupID{1}, func(cfg *Config) {
		cfg.SnapshotEntries = 100
		cfg.SnapshotCatchUpEntries = 10
	})
	lead := c.leader(t, 1, 10*time.Second)
	down := c.ids[0]
	if down == lead {
		down = c.ids[1]
	}
	c.stop(down)
	// ~2 MB of state, so the snapshot takes several chunks. Proposals go in
	// batches of 50, each retried whole if leadership moves meanwhile.
	big := make([]byte, 4096)
	for i := 0; i < 500; {
		lead = c.leader(t, 1, 10*time.Second)
		g := c.nodes[lead].Group(1)
		var last Proposal
		n := 0
		for ; n < 50; n++ {
			copy(big, fmt.Sprintf("e%05d", i+n))
			p, err := g.Propose(context.Background(), big)
			if err != nil {
				t.Logf("batch at %d: %v (retrying)", i, err)
				break
			}
			last = p
		}
		deadline := time.Now().Add(5 * time.Second)
		for c.sms[lead][1].appliedIndex() < last.Index && time.Now().Before(deadline) && g.leaderEvent().Term == last.Term {
			time.Sleep(time.Millisecond)
		}
		if n == 50 && c.sms[lead][1].appliedIndex() >= last.Index {
			i += 50
		}
	}
	lead = c.leader(t, 1, 10*time.Second)
	g := c.nodes[lead].Group(1)
	// Both live nodes compact past what the stopped one has: whichever
	// leads when it returns must send a snapshot.
	for _, id := range c.ids {
		if id == down {
			continue
		}
		live := c.nodes[id].Group(1)
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("node %d's log compaction", id), func() bool {
			var first uint64
			_ = live.call(context.Background(), func() { first, _ = live.store.FirstIndex() })
			return first > 300
		})
	}
	c.start(down, nil)
	want := entriesOf(t, g)
	testutil.WaitFor(t, 15*time.Second, "restarted follower to catch up", func() bool {
		return len(entriesOf(t, c.nodes[down].Group(1))) >= len(want)
	})
	// The install is counted on the group's goroutine after the applier
	// finished it, so a View may see the entries a moment before.
	testutil.WaitFor(t, 5*time.Second, "the follower's snapshot install", func() bool {
		return testCounter(c.nodes[down].metrics.snapshotsInstalled) > 0
	})
	if got := entriesOf(t, c.nodes[down].Group(1)); !slices.Equal(want, got[:len(want)]) {
		t.Fatalf("follower has %d entries, leader %d, contents differ", len(got), len(want))
	}
}

// TestGRPCDeadLeaderReplaced: over gRPC, the survivors elect a new leader
// after the leader's node stops (how long it takes is logged; the bound in
// ticks is TestManualTicksDriveElections'), and keep committing while
// messages for the dead peer are dropped, not queued without bound.
func TestGRPCDeadLeaderReplaced(t *testing.T) {
	c := newGRPCCluster(t, 3, []GroupID{1}, nil)
	lead := c.leader(t, 1, 10*time.Second)
	c.stop(lead)
	start := time.Now()
	newLead := c.leader(t, 1, 10*time.Second)
	t.Logf("leader %d replaced by %d in %v", lead, newLead, time.Since(start))
	n := c.nodes[newLead]
	for i := range 100 {
		p, err := n.Group(1).Propose(context.Background(), []byte(fmt.Sprintf("e%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 5*time.Second, "commit without the dead node", func() bool {
			return c.sms[newLead][1].appliedIndex() >= p.Index
		})
	}
	testutil.WaitFor(t, 5*time.Second, "messages to the dead peer to be dropped", func() bool {
		return testCounter(n.metrics.droppedMsgs) > 0
	})
	peer := n.tr.(*grpcTransport).peers[lead]
	peer.mu.Lock()
	queued := len(peer.queue)
	peer.mu.Unlock()
	if queued > n.cfg.PeerQueueMessages {
		t.Fatalf("%d messages queued for the dead peer, bound is %d", queued, n.cfg.PeerQueueMessages)
	}
}

// lockedLines collects log lines from several goroutines.
type lockedLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	return len(p), nil
}

// count returns how many lines contain every one of parts.
func (l *lockedLines) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			n++
		}
	}
	return n
}

// TestGRPCPeerOutageLoggedOnce: a peer that cannot be reached is reported
// at warn level once per cause (which is how an operator learns of a
// refused TLS handshake), not on every retry, and its return is reported.
func TestGRPCPeerOutageLoggedOnce(t *testing.T) {
	c, l, lost := startAndLoseFollower(t)
	peer := fmt.Sprintf(`"peer":%d`, lost)
	refused := "connect: connection refused"
	testutil.WaitFor(t, 10*time.Second, "several refused connections to the stopped peer", func() bool {
		return l.count(peer, "raft peer unreachable", refused) >= 3
	})
	if warns := l.count(peer, `"level":"warn"`, "raft peer unreachable", refused); warns != 1 {
		t.Fatalf("%d warn lines for one outage of peer %d, want 1:\n%s", warns, lost, strings.Join(l.lines, ""))
	}
	c.start(lost, nil)
	testutil.WaitFor(t, 10*time.Second, "the peer's return to be logged", func() bool {
		return l.count(peer, "raft peer reachable again") == 1
	})
}

// TestGRPCReconnectsSoonAfterLongOutage: after a peer was down for a while,
// its return is noticed within about a second (the transport caps gRPC's
// reconnect backoff, which otherwise grows to two minutes: ~10 s at this
// point of an outage).
func TestGRPCReconnectsSoonAfterLongOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps a peer down for ~15 s")
	}
	c, l, lost := startAndLoseFollower(t)
	peer := fmt.Sprintf(`"peer":%d`, lost)
	// The leader's heartbeats keep failing; with gRPC's default backoff its
	// connection would next be retried ~25 s into the outage.
	testutil.WaitFor(t, 60*time.Second, "a long outage (20 failed sends)", func() bool {
		return l.count(peer, "raft peer unreachable") >= 20
	})
	c.start(lost, nil)
	back := time.Now()
	testutil.WaitFor(t, 4*time.Second, "the leader to reach the restarted peer", func() bool {
		return l.count(peer, "raft peer reachable again") == 1
	})
	t.Logf("peer %d reached %v after its restart", lost, time.Since(back).Round(time.Millisecond))
}

// startAndLoseFollower starts three nodes with one group, stops a follower
// and returns the cluster, the leader's (debug) log, which keeps sending
// heartbeats to the lost follower, and the follower's id.
func startAndLoseFollower(t *testing.T) (*grpcCluster, *lockedLines, uint64) {
	t.Helper()
	logs := map[uint64]*lockedLines{1: {}, 2: {}, 3: {}}
	c := newGRPCCluster(t, 3, []GroupID{1}, func(cfg *Config) {
		cfg.Logger = zerolog.New(logs[cfg.NodeID]).Level(zerolog.DebugLevel)
	})
	lead := c.leader(t, 1, 10*time.Second)
	lost := lead%3 + 1
	c.stop(lost)
	return c, logs[lead], lost
}

func TestNewFrame(t *testing.T) {
	for _, n := range []int{0, 1, smallFrame, smallFrame + 1, 3 * smallFrame} {
		frame, envs := newFrame(1, 2, n)
		if frame.GetFrom() != 1 || frame.GetTo() != 2 || len(frame.GetMessages()) != n || len(envs) != n {
			t.Fatalf("newFrame(1, 2, %d) = %v with %d envelopes", n, frame, len(envs))
		}
		for i := range envs {
			if frame.GetMessages()[i] != &envs[i] {
				t.Fatalf("n=%d: message %d is not envelope %d", n, i, i)
			}
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { newFrame(1, 2, smallFrame) }); allocs > 1 {
		t.Fatalf("a frame of %d messages took %.0f allocations, want 1", smallFrame, allocs)
	}
}
