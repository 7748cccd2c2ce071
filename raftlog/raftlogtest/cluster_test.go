package raftlogtest

import (
	"context"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/raftlog"
)

// counter counts applied entries in its bucket and records, in order, the
// steps raftlog took: apply, acknowledge, reveal.
type counter struct {
	mu    sync.Mutex
	steps []string
}

func (s *counter) note(step string) {
	s.mu.Lock()
	s.steps = append(s.steps, step)
	s.mu.Unlock()
}

func (s *counter) Apply(b *bolt.Bucket, ents []raftlog.Entry) (raftlog.Applied, error) {
	for range ents {
		if _, err := b.NextSequence(); err != nil {
			return raftlog.Applied{}, err
		}
	}
	s.note("apply")
	return raftlog.Applied{Acknowledge: func() { s.note("acknowledge") }, Reveal: func() { s.note("reveal") }}, nil
}

func (s *counter) Restore(*bolt.Bucket) error { return nil }

func (s *counter) count(t *testing.T, g *raftlog.Group) uint64 {
	var n uint64
	if err := g.View(context.Background(), func(b *bolt.Bucket) error { n = b.Sequence(); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func propose(t *testing.T, g *raftlog.Group, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := g.Propose(ctx, []byte(data)); err != nil {
		t.Fatal(err)
	}
}

// Nobody leads until the test elects; a held commit is replicated but not
// applied; release applies it in raftlog's order on every node.
func TestElectHoldRelease(t *testing.T) {
	sms := []*counter{{}, {}, {}}
	var mu sync.Mutex
	events := map[int]raftlog.LeaderEvent{}
	c := New(t, Options{
		Nodes:        3,
		StateMachine: func(i int) raftlog.StateMachine { return sms[i] },
		Watch: func(i int, ev raftlog.LeaderEvent) {
			mu.Lock()
			events[i] = ev
			mu.Unlock()
		},
	})
	if lead := c.Leader(); lead != -1 {
		t.Fatalf("node %d leads before any tick", lead)
	}
	c.Elect(1)
	testutil.WaitFor(t, 10*time.Second, "every node to hear of node 1's leadership", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range 3 {
			if events[i].Leader != c.NodeID(1) {
				return false
			}
		}
		return true
	})
	propose(t, c.Group(1), "a")
	c.WaitApplied(0, 1, 2)
	for i, sm := range sms {
		if n := sm.count(t, c.Group(i)); n != 1 {
			t.Fatalf("node %d applied %d entries, want 1", i, n)
		}
	}

	c.HoldCommits(c.Group(1).Status().Committed)
	propose(t, c.Group(1), "b")
	testutil.WaitFor(t, 10*time.Second, "b replicated", func() bool {
		ents := c.Appended()
		return len(ents) == 2 && string(ents[1].Data) == "b"
	})
	// Heartbeat rounds, in which the followers' acknowledgements of b
	// arrive: the leader still must not commit it.
	for range 5 {
		c.Tick(1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.Group(1).ReadIndex(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Group(1).Status(); st.Committed >= c.Appended()[1].Index {
		t.Fatalf("held entry committed: %+v", st)
	}
	c.ReleaseCommits()
	c.WaitApplied(0, 1, 2)
	for i, sm := range sms {
		if n := sm.count(t, c.Group(i)); n != 2 {
			t.Fatalf("node %d applied %d entries, want 2", i, n)
		}
		sm.mu.Lock()
		steps := sm.steps
		sm.mu.Unlock()
		// Every Acknowledge follows its Apply, every Reveal its
		// Acknowledge.
		n := map[string]int{}
		for _, step := range steps {
			n[step]++
			if n["apply"] < n["acknowledge"] || n["acknowledge"] < n["reveal"] {
				t.Fatalf("node %d steps %v out of order", i, steps)
			}
		}
		if n["apply"] != n["reveal"] {
			t.Fatalf("node %d steps %v: not every Apply revealed", i, steps)
		}
	}

	// Elect again: a new term, whoever leads.
	term := c.Group(1).Status().Term
	c.Elect(1)
	if st := c.Group(1).Status(); !st.IsLeader || st.Term <= term {
		t.Fatalf("after re-election: %+v, want leader in a term after %d", st, term)
	}
	c.Elect(2)
	if lead := c.Leader(); lead != 2 {
		t.Fatalf("leader %d, want 2", lead)
	}
}
