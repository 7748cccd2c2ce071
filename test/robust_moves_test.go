package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// The moves scenario: five proxied nodes, R = 3, partitions moving all
// the time. A mover issues random `placement move` requests (a random
// partition, from one of its voters to a node that holds none of it)
// while a fault nemesis kills (-9), freezes (SIGSTOP) and cuts off nodes
// one at a time, and the suite's clients run. After the faults heal and
// traffic stops, the round passes the suite's checks (nothing lost,
// own results, one id per key, linearizable, equal digests at equal
// applied index) and placement's: every partition on R voters, no move in
// flight, no learner, balanced, and each node holding exactly the
// replicas placed on it (its raft groups and its processors).

// movesPartitions is the partition count of the moves scenario.
const movesPartitions = 4

// movesReplication is its replication factor.
const movesReplication = 3

// movesDeadNodeTimeout is short so that some faults outlast it: the
// planner then repairs, replacing the faulty node's replicas while the
// mover moves others.
const movesDeadNodeTimeout = "3s"

// startMovesCluster starts the scenario's cluster and waits until the
// planner has settled the bootstrap placement (every partition starts on
// all five nodes).
func startMovesCluster(t *testing.T) *cluster {
	c := startCluster(t, clusterOpts{nodes: 5, partitions: movesPartitions, proxied: true,
		extraArgs: func(int) []string {
			return []string{"--replication", strconv.Itoa(movesReplication), "--dead-node-timeout", movesDeadNodeTimeout}
		}})
	if _, err := c.waitPlacementSettled(90 * time.Second); err != nil {
		t.Fatalf("bootstrap placement: %v", err)
	}
	return c
}

// movesRow is what moves rounds found.
type movesRow struct {
	rounds int
	v      verdict
	moves  moveCounts
	faults []string // "name hold", in order
}

// runMovesRound is one round: traffic, mover and faults for chaos, then
// heal, settle and validate.
func runMovesRound(t *testing.T, c *cluster, svc *recorder, rng *rand.Rand, seed uint64, chaos time.Duration) movesRow {
	c.ensureAllUp()
	distinct0, delivered0 := svc.stats()
	unidentified0 := c.net.unidentified.Load()
	rt := startRoundTraffic(t, c, seed, 60*time.Second)
	defer rt.end()
	rt.progress(30)

	ctx, stopMover := context.WithCancel(context.Background())
	mv := &mover{c: c, rng: rand.New(rand.NewPCG(seed, 1)), pending: map[uint32]pendingMove{}}
	moverDone := make(chan struct{})
	go func() { defer close(moverDone); mv.run(ctx) }()
	defer func() { stopMover(); <-moverDone }()

	out := movesRow{rounds: 1}
	end := time.Now().Add(chaos)
	for time.Now().Before(end) && !t.Failed() {
		fp := randomFault(rng)
		fp.inject(t, c, rng)
		hold := time.Duration(1000+rng.IntN(4000)) * time.Millisecond
		out.faults = append(out.faults, fmt.Sprintf("%s %v", fp.name(), hold))
		time.Sleep(hold) // the fault's duration, not synchronisation
		fp.heal(t, c)
		if rn, ok := fp.(returningNode); ok {
			rt.traffic.readBurst(rn.returning(), 10)
		}
		rt.progress(20) // the cluster serves again before the next fault
	}
	stopMover()
	<-moverDone
	c.ensureAllUp()
	rt.progress(30)
	rt.end()

	pv, err := c.waitPlacementSettled(120 * time.Second)
	if err != nil {
		t.Errorf("placement after healing: %v", err)
	}
	mv.settle(pv)
	out.moves = mv.counts()
	if err := c.waitReplicasFollowPlacement(60*time.Second, pv); err != nil {
		t.Errorf("replicas after healing: %v", err)
	}
	if applied, err := c.waitConverged(60 * time.Second); err != nil {
		t.Errorf("moves: %v", err)
	} else {
		t.Logf("moves: replicas converged at applied indexes %v with equal state digests", applied)
	}
	t.Logf("moves: %d proxied connections closed as from no node's process", c.net.unidentified.Load()-unidentified0)
	out.v = validate(c, rt.rec, svc, "Echo")
	out.v.distinct -= distinct0
	out.v.delivered -= delivered0
	t.Logf("moves: faults %s", strings.Join(out.faults, ", "))
	t.Logf("moves: %s", out.moves)
	reportVerdict(t, "moves", out.v)
	if out.v.linearizable != "Ok" {
		t.Errorf("moves: linearizable: %s", out.v.linearizable)
	}
	if t.Failed() {
		dumpRecording(t, rt.rec)
	}
	return out
}

// randomFault is one of the suite's faults on one node at a time: kill -9
// (the leader of most partitions or a random node), SIGSTOP of that
// leader, a random node or that leader cut off, or only what that leader
// sends dropped.
func randomFault(rng *rand.Rand) failpoint {
	fps := []failpoint{
		&killFailpoint{leader: true},
		&killFailpoint{},
		&stopFailpoint{},
		&isolateFailpoint{},
		&isolateFailpoint{leader: true},
		&isolateFailpoint{leader: true, outboundOnly: true},
	}
	return fps[rng.IntN(len(fps))]
}

// pendingMove is an accepted move not yet seen finished.
type pendingMove struct{ from, to uint64 }

// mover issues random moves until its context ends.
type mover struct {
	c   *cluster
	rng *rand.Rand

	mu         sync.Mutex
	issued     int
	accepted   int
	refused    map[int]int // HTTP status -> count
	noAnswer   int         // no HTTP answer (the node asked was down or frozen)
	finished   int         // accepted, then seen done: the target a voter, the source gone
	superseded int         // accepted, then changed by a later move of the partition before seen done
	pending    map[uint32]pendingMove
}

// moveCounts is what a mover did.
type moveCounts struct {
	issued, accepted, noAnswer, finished, superseded, overtaken int
	refused                                                     map[int]int
}

func (m moveCounts) String() string {
	var codes []int
	for code := range m.refused {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	var ref []string
	for _, code := range codes {
		ref = append(ref, fmt.Sprintf("%d×%d", code, m.refused[code]))
	}
	return fmt.Sprintf("moves issued %d, accepted %d, seen finished %d, superseded by the next move %d, overtaken by the planner %d, refused %d [%s], no answer %d",
		m.issued, m.accepted, m.finished, m.superseded, m.overtaken, m.refusedTotal(), strings.Join(ref, " "), m.noAnswer)
}

func (m moveCounts) refusedTotal() int {
	n := 0
	for _, k := range m.refused {
		n += k
	}
	return n
}

func (m *mover) run(ctx context.Context) {
	for ctx.Err() == nil {
		m.once(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100+m.rng.IntN(600)) * time.Millisecond): // pacing
		}
	}
}

// once reads the placement through a random node, notes the moves seen
// done, and asks that node to move a random partition.
func (m *mover) once(ctx context.Context) {
	n := m.c.nodes[m.rng.IntN(len(m.c.nodes))]
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pv, err := readPlacementCtx(rctx, n)
	if err != nil || len(pv.Partitions) == 0 {
		return
	}
	m.settle(pv)
	p := pv.Partitions[m.rng.IntN(len(pv.Partitions))]
	var from []uint64
	holds := map[uint64]bool{}
	for _, r := range p.Replicas {
		holds[r.Node] = true
		if r.Role == "voter" {
			from = append(from, r.Node)
		}
	}
	var to []uint64
	for _, x := range m.c.nodes {
		if !holds[uint64(x.id)] {
			to = append(to, uint64(x.id))
		}
	}
	if len(from) == 0 || len(to) == 0 {
		return
	}
	mv := pendingMove{from: from[m.rng.IntN(len(from))], to: to[m.rng.IntN(len(to))]}
	body := fmt.Sprintf(`{"from":%d,"to":%d}`, mv.from, mv.to)
	r, err := do(rctx, http.MethodPost, fmt.Sprintf("%s/placement/partitions/%d/move", n.adminURL(), p.ID), []byte(body), nil)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.issued++
	switch {
	case err != nil:
		m.noAnswer++
	case r.status/100 == 2:
		m.accepted++
		if _, ok := m.pending[p.ID]; ok {
			m.superseded++
		}
		m.pending[p.ID] = mv
	default:
		if m.refused == nil {
			m.refused = map[int]int{}
		}
		m.refused[r.status]++
	}
}

// settle counts the pending moves that pv shows done.
func (m *mover) settle(pv placementView) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range pv.Partitions {
		mv, ok := m.pending[p.ID]
		if !ok || p.Move != nil {
			continue
		}
		roles := map[uint64]string{}
		for _, r := range p.Replicas {
			roles[r.Node] = r.Role
		}
		if _, stays := roles[mv.from]; roles[mv.to] == "voter" && !stays {
			m.finished++
			delete(m.pending, p.ID)
		}
	}
}

// counts returns the tally. Called once the placement settled, the moves
// still pending were overtaken: the planner (balance, or a repair after a
// fault) changed the partition again before the mover saw it done.
func (m *mover) counts() moveCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return moveCounts{issued: m.issued, accepted: m.accepted, noAnswer: m.noAnswer, finished: m.finished,
		superseded: m.superseded, overtaken: len(m.pending), refused: m.refused}
}

func readPlacementCtx(ctx context.Context, n *node) (placementView, error) {
	var v placementView
	r, err := do(ctx, http.MethodGet, n.adminURL()+"/placement", nil, nil)
	if err != nil {
		return v, err
	}
	if r.status != http.StatusOK {
		return v, fmt.Errorf("GET /placement: %d %s", r.status, r.body)
	}
	return v, json.Unmarshal(r.body, &v)
}

// waitPlacementSettled waits until every node's GET /placement shows every
// partition on movesReplication voters, no learner, no move in flight,
// and replicas per node within one of even; all nodes must show the same.
func (c *cluster) waitPlacementSettled(timeout time.Duration) (placementView, error) {
	var last string
	var pv placementView
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		pv, last, ok = c.placementSettled()
		if ok {
			return pv, nil
		}
		if time.Now().After(deadline) {
			return pv, fmt.Errorf("not settled within %v: %s", timeout, last)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

func (c *cluster) placementSettled() (placementView, string, bool) {
	var first placementView
	var firstDesc string
	for i, n := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		pv, err := readPlacementCtx(ctx, n)
		cancel()
		if err != nil {
			return pv, fmt.Sprintf("node %d: %v", n.id, err), false
		}
		desc := describePlacement(pv)
		if i == 0 {
			first, firstDesc = pv, desc
		} else if desc != firstDesc {
			return pv, fmt.Sprintf("node %d shows %s, node %d %s", c.nodes[0].id, firstDesc, n.id, desc), false
		}
	}
	perNode := map[uint64]int{}
	for _, n := range c.nodes {
		perNode[uint64(n.id)] = 0
	}
	for _, p := range first.Partitions {
		if p.Move != nil || len(p.Replicas) != movesReplication {
			return first, firstDesc, false
		}
		for _, r := range p.Replicas {
			if r.Role != "voter" {
				return first, firstDesc, false
			}
			perNode[r.Node]++
		}
	}
	if len(first.Partitions) != movesPartitions || !spreadOK(perNode) {
		return first, firstDesc + fmt.Sprintf(" (replicas per node %v)", perNode), false
	}
	return first, firstDesc, true
}

// describePlacement is a short form of a placement: p:node/role,… [move].
func describePlacement(pv placementView) string {
	var b strings.Builder
	for _, p := range pv.Partitions {
		fmt.Fprintf(&b, "%d:", p.ID)
		for _, r := range p.Replicas {
			fmt.Fprintf(&b, "%d/%s,", r.Node, r.Role)
		}
		if p.Move != nil {
			fmt.Fprintf(&b, "move%v→%v", p.Move.From, p.Move.To)
		}
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}

// waitReplicasFollowPlacement waits until every node holds exactly the
// replicas pv places on it, besides the metadata group: its raft groups
// (GET /cluster, and the raftgate_raft_has_leader series) and its
// processors (the raftgate_partition_outbox_depth series).
func (c *cluster) waitReplicasFollowPlacement(timeout time.Duration, pv placementView) error {
	want := map[int][]uint32{}
	for _, n := range c.nodes {
		want[n.id] = []uint32{0}
	}
	for _, p := range pv.Partitions {
		for _, r := range p.Replicas {
			want[int(r.Node)] = append(want[int(r.Node)], p.ID)
		}
	}
	var last string
	deadline := time.Now().Add(timeout)
	for {
		last = ""
		for _, n := range c.nodes {
			if got := c.heldReplicas(n); !slices.Equal(got, describeHeld(want[n.id])) {
				last += fmt.Sprintf(" node %d holds %s, placed %v;", n.id, got, want[n.id])
			}
		}
		if last == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("within %v:%s", timeout, last)
		}
		time.Sleep(200 * time.Millisecond) // poll interval
	}
}

var (
	hasLeaderSeries = regexp.MustCompile(`(?m)^raftgate_raft_has_leader\{group="(\d+)"\}`)
	outboxSeries    = regexp.MustCompile(`(?m)^raftgate_partition_outbox_depth\{partition="(\d+)"\}`)
)

// heldReplicas describes what node n holds: "groups [..] metrics [..]
// processors [..]", each sorted; processors exclude the metadata group.
func (c *cluster) heldReplicas(n *node) []string {
	v, err := c.view(n)
	if err != nil {
		return []string{err.Error()}
	}
	var groups []uint32
	for _, p := range v.Partitions {
		groups = append(groups, p.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := do(ctx, http.MethodGet, n.adminURL()+"/metrics", nil, nil)
	if err != nil {
		return []string{err.Error()}
	}
	series := func(re *regexp.Regexp) []uint32 {
		var out []uint32
		for _, m := range re.FindAllStringSubmatch(string(r.body), -1) {
			id, _ := strconv.ParseUint(m[1], 10, 32)
			out = append(out, uint32(id))
		}
		return out
	}
	procs := append([]uint32{0}, series(outboxSeries)...)
	return []string{sortedIDs("groups", groups), sortedIDs("metrics", series(hasLeaderSeries)), sortedIDs("processors", procs)}
}

// describeHeld is what heldReplicas shows for a node holding ids.
func describeHeld(ids []uint32) []string {
	return []string{sortedIDs("groups", ids), sortedIDs("metrics", ids), sortedIDs("processors", ids)}
}

func sortedIDs(what string, ids []uint32) string {
	ids = slices.Clone(ids)
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return fmt.Sprintf("%s %v", what, slices.Compact(ids))
}

// TestRobustnessMoves is the moves scenario's short round (about 20 s of
// faults and moves); TestRobustnessMovesSoak (-tags soak) runs rounds for
// RAFTGATE_SOAK_DURATION.
func TestRobustnessMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("robustness suite skipped in -short mode")
	}
	seed := robustnessSeed(t)
	t.Logf("seed %d (replay with RAFTGATE_ROBUSTNESS_SEED=%d)", seed, seed)
	c := startMovesCluster(t)
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)
	r := runMovesRound(t, c, svc, rand.New(rand.NewPCG(seed, 0)), seed, 20*time.Second)
	if r.moves.accepted == 0 {
		t.Errorf("no move was accepted: %s", r.moves)
	}
}

// TestMoveAwayFromDownReplica: a partition is moved off a node while that
// node is down (kill -9). When it comes back, its replica of the
// partition is one the group removed while it was away, which it cannot
// learn from the group: it is in no configuration the others apply, and
// they drop its messages. The node must still become ready and delete
// that replica (the cluster record shows the group's configuration
// without it at an index past what the replica applied). Found by
// TestRobustnessMoves, as two bugs: the node kept the replica, which
// campaigned forever; and, once it was deleted, the node's start-up log
// check, still waiting for that replica to catch up, gave up and never
// served (/readyz 503 for good).
func TestMoveAwayFromDownReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	c := startCluster(t, clusterOpts{nodes: 4, partitions: 2,
		extraArgs: func(int) []string { return []string{"--replication", "3"} }})
	var pv placementView
	testutil.WaitFor(t, 60*time.Second, "every partition on three voters", func() bool {
		v, err := readPlacement(c.nodes[0])
		if err != nil {
			return false
		}
		for _, p := range v.Partitions {
			if p.Move != nil || len(p.Replicas) != 3 {
				return false
			}
		}
		pv = v
		return true
	})
	// Partition 1 moves from a node that is not its leader's to the node
	// that holds none of it.
	p := pv.Partitions[0]
	holds := map[uint64]bool{}
	for _, r := range p.Replicas {
		holds[r.Node] = true
	}
	var from, to *node
	leader := c.leaders()[p.ID]
	for _, n := range c.nodes {
		switch {
		case !holds[uint64(n.id)]:
			to = n
		case from == nil && uint64(n.id) != leader:
			from = n
		}
	}
	c.kill(from)
	body := fmt.Sprintf(`{"from":%d,"to":%d}`, from.id, to.id)
	r, err := do(context.Background(), http.MethodPost, fmt.Sprintf("%s/placement/partitions/%d/move", to.adminURL(), p.ID), []byte(body), nil)
	if err != nil || r.status/100 != 2 {
		t.Fatalf("move partition %d from node %d to node %d: %v %+v", p.ID, from.id, to.id, err, r)
	}
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("partition %d moved from node %d to node %d", p.ID, from.id, to.id), func() bool {
		v, err := readPlacement(to)
		if err != nil {
			return false
		}
		for _, q := range v.Partitions {
			if q.ID != p.ID {
				continue
			}
			roles := map[uint64]string{}
			for _, r := range q.Replicas {
				roles[r.Node] = r.Role
			}
			_, stays := roles[uint64(from.id)]
			return q.Move == nil && roles[uint64(to.id)] == "voter" && !stays
		}
		return false
	})
	c.start(from)
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("node %d last: %s", from.id, last)
		}
	}()
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("node %d ready again, without its replica of partition %d", from.id, p.ID), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := do(ctx, http.MethodGet, from.adminURL()+"/readyz", nil, nil)
		if err != nil {
			last = err.Error()
			return false
		}
		v, err := c.view(from)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("/readyz %d %s, /cluster %+v", r.status, r.body, v)
		return r.status == http.StatusOK && !slices.ContainsFunc(v.Partitions, func(g groupView) bool {
			return g.ID == p.ID
		})
	})
	t.Logf("node %d: %s", from.id, last)
}
