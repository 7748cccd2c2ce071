package raftlog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/raftgate/raftgate/raftlog/wal"
)

// errPowerCut fails every checkpoint after the simulated power cut, so
// state.db keeps only what its last completed commit made durable.
var errPowerCut = errors.New("power cut")

// promises is what one node told others, which a power cut must not take
// back: per group, the highest log index it acknowledged (MsgAppResp) and
// the highest term in which it granted a vote, with the candidate.
type promises struct {
	mu    sync.Mutex
	acked map[GroupID]uint64
	voted map[GroupID][2]uint64 // term, candidate
}

func (p *promises) record(g GroupID, m *pb.Message) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case m.GetType() == pb.MsgAppResp && !m.GetReject():
		p.acked[g] = max(p.acked[g], m.GetIndex())
	case m.GetType() == pb.MsgVoteResp && !m.GetReject():
		if v := p.voted[g]; m.GetTerm() > v[0] {
			p.voted[g] = [2]uint64{m.GetTerm(), m.GetTo()}
		}
	}
}

// TestPowerLossKeepsWhatTheNodeAcknowledged: a node's power is cut (every
// write its log did not fdatasync is thrown away, and its state file keeps
// only its last checkpoint) at a random moment under load, as follower and
// as leader. Reopened, its log still holds every entry it acknowledged and
// the term and vote it granted; restarted, it converges with the others to
// equal state digests, and every proposal its leader answered is applied.
func TestPowerLossKeepsWhatTheNodeAcknowledged(t *testing.T) {
	for _, victimLeads := range []bool{false, true} {
		t.Run(fmt.Sprintf("leader=%v", victimLeads), func(t *testing.T) {
			testPowerLoss(t, victimLeads)
		})
	}
}

func testPowerLoss(t *testing.T, victimLeads bool) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	var (
		fsMu    sync.Mutex
		fs      = map[uint64]*wal.CrashFS{}
		crashed sync.Map // node id -> true once its power is cut
	)
	groups := []GroupID{MetaGroup, 1, 2}
	c := newCluster(t, seed, 3, groups, func(cfg *Config) {
		id := cfg.NodeID
		cfs := wal.NewCrashFS()
		fsMu.Lock()
		fs[id] = cfs
		fsMu.Unlock()
		cfg.CheckpointInterval = 30 * time.Millisecond
		cfg.WALSegmentBytes = 256 << 10 // several cut-overs under this load
		cfg.Knobs = &Knobs{LogFS: cfs, FailCommit: func() error {
			if _, ok := crashed.Load(id); ok {
				return errPowerCut
			}
			return nil
		}}
	})
	lead := c.leader(1, c.ids, 5*time.Second)
	victim := lead
	if !victimLeads {
		victim = c.ids[(slices.Index(c.ids, lead)+1)%len(c.ids)]
	}
	told := &promises{acked: map[GroupID]uint64{}, voted: map[GroupID][2]uint64{}}
	onSend := func(from uint64, g GroupID, m *pb.Message) {
		if from == victim {
			if _, ok := crashed.Load(victim); !ok {
				told.record(g, m)
			}
		}
	}
	c.nw.onSend.Store(&onSend)

	// Load on both partitions until the cut; answered proposals are kept.
	var answered sync.Map // data -> group
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	nodes, sms := maps.Clone(c.nodes), maps.Clone(c.sms)
	for w := range 8 {
		wg.Go(func() {
			g := GroupID(1 + w%2)
			for i := 0; ctx.Err() == nil; i++ {
				data := fmt.Sprintf("w%d-%d", w, i)
				if answer(ctx, nodes, sms, g, data) {
					answered.Store(data, g)
				} else if ctx.Err() == nil {
					time.Sleep(time.Millisecond) // back off; a leader is being elected
				}
			}
		})
	}
	testutil.WaitFor(t, 10*time.Second, "some load applied", func() bool {
		n := 0
		answered.Range(func(any, any) bool { n++; return n < 100 })
		return n >= 100
	})
	// Cut at a random moment within the next 200 ms.
	cutAfter := time.Duration(rng.IntN(200)) * time.Millisecond
	timer := time.NewTimer(cutAfter)
	<-timer.C
	crashed.Store(victim, true)
	fsMu.Lock()
	fs[victim].Crash()
	fsMu.Unlock()
	_ = c.nodes[victim].Close() // its writes fail now; errors expected
	delete(c.nodes, victim)
	stop()
	wg.Wait()

	// What survived, read straight from the disk.
	w, err := wal.Open(wal.Options{Dir: filepath.Join(c.dirs[victim], walDirName), Logger: c.config(victim).Logger})
	if err != nil {
		t.Fatalf("reopen the victim's log after the power cut: %v", err)
	}
	told.mu.Lock()
	for _, g := range groups {
		if got := w.LastIndex(uint32(g)); got < told.acked[g] {
			t.Errorf("group %d: log ends at %d after the power cut, but the node acknowledged %d", g, got, told.acked[g])
		}
		hs := w.HardState(uint32(g))
		if v := told.voted[g]; hs.GetTerm() < v[0] || (hs.GetTerm() == v[0] && hs.GetVote() != v[1]) {
			t.Errorf("group %d: hard state term %d vote %d after the power cut, but the node voted for %d in term %d", g, hs.GetTerm(), hs.GetVote(), v[1], v[0])
		}
	}
	t.Logf("cut after %v; acknowledged %v, voted %v", cutAfter, told.acked, told.voted)
	told.mu.Unlock()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	crashed.Delete(victim)
	c.start(victim)

	// Everything answered is applied everywhere, with equal digests.
	for _, g := range groups[1:] {
		var want []string
		answered.Range(func(k, v any) bool {
			if v.(GroupID) == g {
				want = append(want, k.(string))
			}
			return true
		})
		got := c.converged(g, len(want), 20*time.Second)
		for _, d := range want {
			if !slices.Contains(got, d) {
				t.Fatalf("group %d: answered proposal %q is not in the converged log", g, d)
			}
		}
		c.sameDigests(g, 10*time.Second)
	}
}

// answer proposes data to whichever node leads g and reports whether that
// leader applied it while still leading in the term it appended it in (so
// the entry at that index is this one): the answer a client would get.
func answer(ctx context.Context, nodes map[uint64]*Node, sms map[uint64]map[GroupID]*recordingSM, g GroupID, data string) bool {
	for id, n := range nodes {
		grp := n.Group(g)
		if !grp.leaderEvent().IsSelf {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		p, err := grp.Propose(pctx, []byte(data))
		if err != nil {
			return false
		}
		for sms[id][g].appliedIndex() < p.Index {
			if pctx.Err() != nil {
				return false
			}
			time.Sleep(200 * time.Microsecond) // poll interval
		}
		ev := grp.leaderEvent()
		return ev.IsSelf && ev.Term == p.Term
	}
	return false
}
