package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/raftlog"
)

// crashRound is one kill -9 at a named durability boundary of a node's
// storage (RAFTGATE_FAILPOINT, cmd/raftgate/failpoint.go).
type crashRound struct {
	failpoint string
	// leader makes the victim the node preferred for most partitions,
	// which must lead at least half of them when it dies.
	leader bool
	// hits is the victim's /metrics counter of the boundary, to aim the
	// kill a few seconds into the restarted node's run.
	hits string
}

var crashRounds = []crashRound{
	{failpoint: "after-log-sync", leader: true, hits: "raftgate_wal_fsync_seconds_count"},
	{failpoint: "before-log-write", hits: "raftgate_wal_batch_entries_count"},
	{failpoint: "after-log-write", hits: "raftgate_wal_batch_entries_count"},
	{failpoint: "during-checkpoint", hits: "raftgate_checkpoint_seconds_count"},
}

// TestCrashFailpoints runs, on one three-node cluster under the
// robustness suite's traffic (sends, resends, plain sends, calls, reads),
// one round per failpoint (two drawn by the seed in the ordinary run, all
// with -tags soak): a node is restarted with RAFTGATE_FAILPOINT,
// kills itself with SIGKILL at the N-th hit of that boundary (N aimed a
// few seconds in), and is restarted from its data dir without it. Then
// every invocation the cluster acknowledged must still be there: read
// through a node other than the one that acknowledged it, and attached to
// through every node, each with exactly its own result (validate: no loss,
// no wrong or second result, no 5xx that says "lost", linearizable), and
// the replicas must converge with equal state digests.
func TestCrashFailpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash tests skipped in -short mode")
	}
	seed := robustnessSeed(t)
	t.Logf("seed %d (replay with RAFTGATE_ROBUSTNESS_SEED=%d)", seed, seed)
	// The ordinary run checks two of the boundaries, drawn by the seed
	// (the suite's time); -tags soak checks every one.
	rounds := slices.Clone(crashRounds)
	if !soak {
		rand.New(rand.NewPCG(seed, 1)).Shuffle(len(rounds), func(i, j int) { rounds[i], rounds[j] = rounds[j], rounds[i] })
		rounds = rounds[:2]
	}
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)
	for i, r := range rounds {
		t.Run(r.failpoint, func(t *testing.T) {
			parent := c.t
			c.t = t
			defer func() { c.t = parent }()
			runCrashRound(t, c, svc, r, rand.New(rand.NewPCG(seed, uint64(i))), seed+uint64(i)*1000)
		})
		if t.Failed() {
			return
		}
	}
}

func runCrashRound(t *testing.T, c *cluster, svc *recorder, r crashRound, rng *rand.Rand, seed uint64) {
	c.ensureAllUp()
	distinct0, delivered0 := svc.stats()
	rt := startRoundTraffic(t, c, seed, 30*time.Second)
	defer rt.end()
	rec, progress := rt.rec, rt.progress

	victim := c.nodes[rng.IntN(len(c.nodes))]
	if r.leader {
		victim = preferredOfMost(c)
	}
	if !r.leader {
		crashAt(t, c, victim, r, progress, seed)
	} else {
		// The kill must come after the hand-backs, which take longer when
		// an earlier hand-off did not hold (raftlog balance.go backs off):
		// each try starts from a balanced cluster, and a node killed too
		// early is brought back and tried again.
		for try := 1; ; try++ {
			waitLeading(t, victim, 6*time.Second)
			led := crashAt(t, c, victim, r, progress, seed+uint64(try))
			if 2*led >= robustnessPartitions {
				break
			}
			if try == 3 {
				t.Errorf("%s: node %d led %d of %d partitions when it died, want at least half (3 tries)", r.failpoint, victim.id, led, robustnessPartitions)
				break
			}
			t.Logf("%s: node %d died leading %d partitions; again", r.failpoint, victim.id, led)
			c.restart(victim)
		}
	}
	c.restart(victim)
	progress(30)
	rt.end()

	if applied, err := c.waitConverged(30 * time.Second); err != nil {
		t.Errorf("%s: %v", r.failpoint, err)
	} else {
		t.Logf("%s: replicas converged at applied indexes %v with equal state digests", r.failpoint, applied)
	}
	readThroughOtherNodes(rt.traffic)
	out := row{failpoint: r.failpoint, v: validate(c, rec, svc, "Echo")}
	out.v.distinct -= distinct0
	out.v.delivered -= delivered0
	report(t, r.failpoint, out)
	if t.Failed() {
		dumpRecording(t, rec)
	}
}

// crashAt restarts victim with r's failpoint, aimed a few seconds into its
// run from the rate of hits it had while progress(30) more invocations
// were acknowledged, and waits until it killed itself there. It returns how
// many partitions the victim said it led last before it died.
func crashAt(t *testing.T, c *cluster, victim *node, r crashRound, progress func(int), seed uint64) (led int) {
	t.Helper()
	hits0, since := metricValue(t, victim, r.hits), time.Now()
	progress(30)
	rate := (metricValue(t, victim, r.hits) - hits0) / time.Since(since).Seconds()
	// A follower restarts in about a second; a preferred leader gets its
	// partitions back once the others have led them for 5 s (raftlog
	// balance.go), so its kill is aimed later.
	aim := 3 * time.Second
	if r.leader {
		aim = 9 * time.Second
	}
	killAt := max(5, int(rate*aim.Seconds()))
	t.Logf("%s: node %d, %.0f hits/s, kill at hit %d", r.failpoint, victim.id, rate, killAt)

	c.terminate(victim, 20*time.Second)
	logStart := fileSize(victim.logPath)
	victim.env = []string{
		fmt.Sprintf("RAFTGATE_FAILPOINT=%s@%d", r.failpoint, killAt),
		fmt.Sprintf("RAFTGATE_FAILPOINT_SEED=%d", seed),
	}
	c.start(victim)
	victim.env = nil
	started := time.Now()
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("node %d to kill itself at %s", victim.id, r.failpoint), func() bool {
		if !victim.alive() {
			return true
		}
		if k, err := partitionsLedBy(victim); err == nil {
			led = k
		}
		return false
	})
	if b, err := os.ReadFile(victim.logPath); err != nil || !strings.Contains(string(b[logStart:]), "failpoint reached") {
		t.Fatalf("node %d exited without reaching its failpoint:\n%s", victim.id, tail(victim.logPath, 20))
	}
	t.Logf("%s: node %d killed itself %v after its start, leading %d partitions", r.failpoint, victim.id, time.Since(started).Round(time.Millisecond), led)
	return led
}

// waitLeading waits until node n has led at least half the partitions for
// hold without a break, long enough for every hand-off's back-off to reset.
func waitLeading(t *testing.T, n *node, hold time.Duration) {
	t.Helper()
	var since time.Time
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("node %d to lead half the partitions for %v", n.id, hold), func() bool {
		if k, err := partitionsLedBy(n); err != nil || 2*k < robustnessPartitions {
			since = time.Time{}
			return false
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= hold
	})
}

// preferredOfMost is the node that leader balancing makes the leader of
// most partitions (raftlog.PreferredLeader).
func preferredOfMost(c *cluster) *node {
	var voters []uint64
	for _, n := range c.nodes {
		voters = append(voters, uint64(n.id))
	}
	count := map[uint64]int{}
	for p := 1; p <= robustnessPartitions; p++ {
		count[raftlog.PreferredLeader(raftlog.GroupID(p), voters)]++
	}
	best := c.nodes[0]
	for _, n := range c.nodes {
		if count[uint64(n.id)] > count[uint64(best.id)] {
			best = n
		}
	}
	return best
}

// partitionsLedBy is how many partitions node n says it leads.
func partitionsLedBy(n *node) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := do(ctx, http.MethodGet, n.adminURL()+"/cluster", nil, nil)
	if err != nil {
		return 0, err
	}
	var v clusterView
	if err := json.Unmarshal(r.body, &v); err != nil {
		return 0, err
	}
	led := 0
	for _, p := range v.Partitions {
		if p.ID != 0 && p.Leader == uint64(n.id) {
			led++
		}
	}
	return led, nil
}

// metricValue reads a counter (or a histogram's _count) from n's
// /metrics.
func metricValue(t *testing.T, n *node, name string) float64 {
	t.Helper()
	r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/metrics", nil, nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("node %d /metrics: %v %v", n.id, err, r)
	}
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("node %d /metrics: %s: %v", n.id, name, err)
			}
			return f
		}
	}
	t.Fatalf("node %d /metrics has no %s", n.id, name)
	return 0
}

// readThroughOtherNodes reads the output of every acknowledged invocation
// through a node other than the one that acknowledged it, recording the
// reads in the history that validate checks (a 404 there is a loss).
func readThroughOtherNodes(tr *traffic) {
	tr.rec.mu.Lock()
	targets := append([]*op(nil), tr.rec.acked...)
	tr.rec.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	work := make(chan *op)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(tr.seed, uint64(3000+w)))
			for t := range work {
				acker := t.Attempts[len(t.Attempts)-1].Node
				other := tr.c.nodes[acker%len(tr.c.nodes)] // ids are 1..n: the next node
				tr.read(ctx, rng, &op{Client: 3000 + w, Kind: kindOutput, Key: t.Key, ID: t.ID, Target: t}, other)
			}
		})
	}
	for _, t := range targets {
		work <- t
	}
	close(work)
	wg.Wait()
}

// fileSize is the size of the file at path, 0 if there is none.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
