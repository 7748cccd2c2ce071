package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/raftlog"
)

// A partition's move (`raftgate placement move P --from A --to B`) goes
// add learner on B → B's snapshot → enter joint (B a voter) → leave
// joint → remove A → A deletes its replica → the leader records the
// result. Each test here kills one of the nodes involved with kill -9
// (RAFTGATE_FAILPOINT) at one step, restarts it, and checks that the move
// finished, nothing half done, under client load.

// moveRole is a node's part in a move.
type moveRole string

const (
	roleLeader   moveRole = "leader"   // the partition's leader, which drives the move
	roleIncoming moveRole = "incoming" // B, which gets the new replica
	roleOutgoing moveRole = "outgoing" // A, whose replica leaves
	roleMeta     moveRole = "meta"     // the metadata group's leader, which records it
)

// moveCase is one cell of the matrix: the node in role kills itself at
// failpoint step.
type moveCase struct {
	step string
	role moveRole
	// racy: the node may never pass the step. The outgoing replica
	// applies its own removal only if the leader's commit reaches it
	// before the leader stops sending to it.
	racy bool
}

func (mc moveCase) String() string { return mc.step + "/" + string(mc.role) }

// moveMatrix is every step of a move with each role whose process passes
// it: "before-" steps on the leader that proposes them, "after-" steps on
// each replica that applies them (B gets the add-learner in its snapshot,
// not as an entry).
func moveMatrix() []moveCase {
	var out []moveCase
	add := func(step string, roles ...moveRole) {
		for _, r := range roles {
			out = append(out, moveCase{step: step, role: r})
		}
	}
	all := []moveRole{roleLeader, roleIncoming, roleOutgoing, roleMeta}
	add("before-add-learner", roleLeader)
	add("after-add-learner", roleLeader, roleOutgoing, roleMeta)
	add("during-snapshot", roleIncoming)
	add("during-snapshot-load", roleIncoming)
	add("before-enter-joint", roleLeader)
	add("after-enter-joint", all...)
	add("before-leave-joint", roleLeader)
	add("after-leave-joint", all...)
	add("before-remove", roleLeader)
	add("after-remove", roleLeader, roleIncoming, roleMeta)
	out = append(out, moveCase{step: "after-remove", role: roleOutgoing, racy: true})
	add("during-remove-group", roleOutgoing)
	add("before-record", roleLeader)
	add("after-record", roleMeta)
	return out
}

// selectMoveCases returns the cases RAFTGATE_MOVE_CASES names
// ("step/role,..."), or n cases drawn from the matrix by rng.
func selectMoveCases(t *testing.T, rng *rand.Rand, n int) []moveCase {
	matrix := moveMatrix()
	if s := os.Getenv("RAFTGATE_MOVE_CASES"); s != "" {
		var out []moveCase
		for _, name := range strings.Split(s, ",") {
			i := slices.IndexFunc(matrix, func(mc moveCase) bool { return mc.String() == strings.TrimSpace(name) })
			if i < 0 {
				t.Fatalf("RAFTGATE_MOVE_CASES: no case %q", name)
			}
			out = append(out, matrix[i])
		}
		return out
	}
	if n >= len(matrix) {
		return matrix
	}
	rng.Shuffle(len(matrix), func(i, j int) { matrix[i], matrix[j] = matrix[j], matrix[i] })
	return matrix[:n]
}

// movePlan is a move and its nodes: the partition's replicas are leader,
// from and meta; to holds none.
type movePlan struct {
	p                      uint32
	leader, from, to, meta uint64
	replicas               []uint64
}

func (mp movePlan) node(r moveRole) uint64 {
	return map[moveRole]uint64{roleLeader: mp.leader, roleIncoming: mp.to, roleOutgoing: mp.from, roleMeta: mp.meta}[r]
}

// moveCluster is a cluster of four nodes with R = 3 and rebalancing
// paused, so that an operator's move stays.
type moveCluster struct {
	*cluster
	svc  *recorder
	seed uint64
}

const (
	moveNodes       = 4
	moveReplication = 3
	movePartitions  = 4
)

func startMoveCluster(t *testing.T, seed uint64) *moveCluster {
	c := startCluster(t, clusterOpts{nodes: moveNodes, partitions: movePartitions,
		extraArgs: func(int) []string { return []string{"--replication", fmt.Sprint(moveReplication)} }})
	mc := &moveCluster{cluster: c, svc: newRecorderTagging(t, true), seed: seed}
	c.registerService(c.nodes[0], "Echo", mc.svc.srv.URL)
	// Refused until the cluster record exists.
	var out []byte
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last raftgate placement pause: %s", out)
		}
	})
	testutil.WaitFor(t, 30*time.Second, "raftgate placement pause", func() bool {
		var err error
		out, err = exec.Command(binary, "placement", "pause", "--admin", c.nodes[0].adminURL()).CombinedOutput()
		return err == nil
	})
	return mc
}

// settledPlacement checks the placement through a live node: no move in
// flight, every partition on R voters and nothing else, and each live
// node holding exactly the replicas placed on it (a replica that left is
// deleted, a new one opened). It returns the placement and, when not
// settled, why.
func (c *cluster) settledPlacement() (placementView, string) {
	var v placementView
	var err error
	for _, n := range c.nodes {
		if n.alive() {
			if v, err = readPlacement(n); err == nil {
				break
			}
		}
	}
	if err != nil || len(v.Partitions) == 0 {
		return v, fmt.Sprintf("no placement: %v", err)
	}
	placed := map[uint64][]uint32{}
	for _, p := range v.Partitions {
		b, _ := json.Marshal(p)
		if p.Move != nil || len(p.Replicas) != v.Replication {
			return v, "partition not settled: " + string(b)
		}
		for _, r := range p.Replicas {
			if r.Role != "voter" {
				return v, "partition not settled: " + string(b)
			}
			placed[r.Node] = append(placed[r.Node], p.ID)
		}
	}
	for _, n := range c.nodes {
		if !n.alive() {
			return v, fmt.Sprintf("node %d is down", n.id)
		}
		cv, err := c.view(n)
		if err != nil {
			return v, fmt.Sprintf("node %d: %v", n.id, err)
		}
		var held []uint32
		for _, p := range cv.Partitions {
			if p.ID != 0 {
				held = append(held, p.ID)
			}
		}
		slices.Sort(held)
		if !slices.Equal(held, placed[uint64(n.id)]) {
			return v, fmt.Sprintf("node %d holds partitions %v, placed there: %v", n.id, held, placed[uint64(n.id)])
		}
	}
	return v, ""
}

// choosePlan waits until the placement is settled and every group is led
// by its preferred voter (where leader balancing keeps it, so a restart
// to arm a node gives it back), and returns a move whose four nodes are
// distinct: a partition holding the metadata leader and led by another
// node, moved from its third replica to the node without one.
func (mc *moveCluster) choosePlan(t *testing.T, rng *rand.Rand) movePlan {
	var plans []movePlan
	var last string
	testutil.WaitFor(t, 120*time.Second, "a settled placement with balanced leaders", func() bool {
		plans = nil
		v, why := mc.settledPlacement()
		if why != "" {
			last = why
			return false
		}
		var all []uint64
		for _, n := range mc.nodes {
			all = append(all, uint64(n.id))
		}
		leaders := mc.leaders()
		meta := leaders[0]
		if meta == 0 || meta != raftlog.PreferredLeader(0, all) {
			last = fmt.Sprintf("metadata group led by %d", meta)
			return false
		}
		for _, p := range v.Partitions {
			var replicas []uint64
			for _, r := range p.Replicas {
				replicas = append(replicas, r.Node)
			}
			leader := leaders[p.ID]
			if leader == 0 || leader != raftlog.PreferredLeader(raftlog.GroupID(p.ID), replicas) {
				last = fmt.Sprintf("partition %d led by %d, replicas %v", p.ID, leader, replicas)
				return false
			}
			if leader == meta || !slices.Contains(replicas, meta) {
				continue
			}
			mp := movePlan{p: p.ID, leader: leader, meta: meta, replicas: replicas}
			for _, id := range all {
				switch {
				case !slices.Contains(replicas, id):
					mp.to = id
				case id != leader && id != meta:
					mp.from = id
				}
			}
			plans = append(plans, mp)
		}
		last = fmt.Sprintf("no partition holds metadata leader %d without leading: %+v", meta, v.Partitions)
		return len(plans) > 0
	})
	if len(plans) == 0 {
		t.Fatal(last)
	}
	return plans[rng.IntN(len(plans))]
}

// moveOutcome is one case's line of the matrix.
type moveOutcome struct {
	mc      moveCase
	plan    movePlan
	reached bool
	took    time.Duration
	failed  bool
}

// runMoveCase runs one case under client load: arm the node in the
// case's role (kill -9, restart with the failpoint), move the partition,
// restart the node once it killed itself, and wait until the move
// finished; then check the history and the replicas.
// out is filled in as the case goes (a failed case ends with Goexit).
func (mc *moveCluster) runMoveCase(t *testing.T, rng *rand.Rand, cs moveCase, out *moveOutcome) {
	start := time.Now()
	c := mc.cluster
	parent := c.t
	c.t = t
	defer func() { c.t = parent }()
	out.mc = cs
	defer func() { out.took, out.failed = time.Since(start).Round(time.Second), t.Failed() }()

	plan := mc.choosePlan(t, rng)
	out.plan = plan
	target := c.nodeByID(plan.node(cs.role))
	t.Logf("%s: partition %d (replicas %v, leader %d) from node %d to node %d, metadata leader %d; node %d dies at %s",
		cs, plan.p, plan.replicas, plan.leader, plan.from, plan.to, plan.meta, target.id, cs.step)
	rt := startRoundTraffic(t, c, mc.seed+uint64(rng.Uint32()), 60*time.Second)
	defer rt.end()
	rt.progress(20)

	c.kill(target)
	logStart := fileSize(target.logPath)
	target.env = failpointEnv(cs.step)
	c.start(target)
	target.env = nil
	c.waitReady(target, 60*time.Second)
	testutil.WaitFor(t, 120*time.Second, "the leaders of the plan back after arming", func() bool {
		l := c.leaders()
		return l[0] == plan.meta && l[plan.p] == plan.leader
	})

	via := c.nodeByID(plan.meta)
	if target == via {
		via = c.nodeByID(plan.from)
	}
	testutil.WaitFor(t, 30*time.Second, "raftgate placement move", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := exec.CommandContext(ctx, binary, "placement", "move", fmt.Sprint(plan.p),
			"--from", fmt.Sprint(plan.from), "--to", fmt.Sprint(plan.to), "--admin", via.adminURL()).CombinedOutput()
		if err != nil {
			t.Logf("raftgate placement move: %v: %s", err, b)
		}
		return err == nil
	})

	want := slices.Clone(plan.replicas)
	want[slices.Index(want, plan.from)] = plan.to
	slices.Sort(want)
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last placement check: %s", last)
		}
	})
	testutil.WaitFor(t, 120*time.Second, "the move to finish", func() bool {
		if !out.reached && !target.alive() {
			b, _ := os.ReadFile(target.logPath)
			if int64(len(b)) < logStart || !strings.Contains(string(b[logStart:]), "failpoint reached") {
				t.Fatalf("node %d exited without reaching failpoint %s:\n%s", target.id, cs.step, tail(target.logPath, 30))
			}
			out.reached = true
			t.Logf("%s: node %d killed itself at %s after %v; restarting it", cs, target.id, cs.step, time.Since(start).Round(time.Millisecond))
			c.start(target)
		}
		v, why := c.settledPlacement()
		if why != "" {
			last = why
			return false
		}
		if !out.reached && !cs.racy {
			// A's deletion of its replica may come after the result is
			// recorded; every other step comes before.
			last = "settled, but node " + fmt.Sprint(target.id) + " has not reached " + cs.step
			return false
		}
		for _, p := range v.Partitions {
			if p.ID != plan.p {
				continue
			}
			var got []uint64
			for _, r := range p.Replicas {
				got = append(got, r.Node)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("partition %d settled on %v, want %v: the move neither finished nor is in flight", plan.p, got, want)
			}
		}
		return true
	})
	t.Logf("%s: the move finished after %v: partition %d on %v", cs, time.Since(start).Round(time.Millisecond), plan.p, want)
	if !out.reached {
		t.Logf("%s: node %d never passed %s (the leader stopped sending to it first): nothing to check beyond the move", cs, target.id, cs.step)
	}
	c.waitReady(target, 60*time.Second)
	rt.progress(20)
	rt.end()
	if applied, err := c.waitConverged(60 * time.Second); err != nil {
		t.Errorf("%s: %v", cs, err)
	} else {
		t.Logf("%s: replicas converged at %v", cs, applied)
	}
	r := row{failpoint: cs.String(), v: validate(c, rt.rec, mc.svc, "Echo")}
	report(t, cs.String(), r)
	if r.v.linearizable != "Ok" {
		t.Errorf("%s: linearizable: %s", cs, r.v.linearizable)
	}
}

// runMoveCases runs cases one after the other on one cluster, each in a
// subtest, stopping at the first failure, and logs the matrix.
func runMoveCases(t *testing.T, seed uint64, cases []moveCase) {
	t.Logf("seed %d (replay with RAFTGATE_ROBUSTNESS_SEED=%d); cases %v", seed, seed, cases)
	mc := startMoveCluster(t, seed)
	rng := rand.New(rand.NewPCG(mc.seed, 38))
	var outs []moveOutcome
	for _, cs := range cases {
		var out moveOutcome
		t.Run(strings.ReplaceAll(cs.String(), "/", "_"), func(t *testing.T) { mc.runMoveCase(t, rng, cs, &out) })
		outs = append(outs, out)
		if out.failed {
			break
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %-9s %-4s %-9s %-8s %s\n", "STEP", "ROLE", "NODE", "REACHED", "RESULT", "TIME")
	for _, o := range outs {
		result := "pass"
		if o.failed {
			result = "FAIL"
		}
		fmt.Fprintf(&b, "%-22s %-9s %-4d %-9v %-8s %v\n", o.mc.step, o.mc.role, o.plan.node(o.mc.role), o.reached, result, o.took)
	}
	t.Logf("move failpoint matrix (seed %d):\n%s", mc.seed, b.String())
}

// TestPlacementMoveFailpoints: on four nodes with R = 3, under client
// load, partitions are moved (`raftgate placement move`) while one node
// involved kills itself with kill -9 at one step of the move and is
// restarted; each move finishes (no move in flight, every partition on R
// voters and no learner, each node holding exactly its placed replicas),
// every acknowledged invocation has its own result, each key one id, the
// histories are linearizable and the replicas converge. The default run
// takes two cases of the matrix drawn by the seed
// (RAFTGATE_MOVE_CASES=step/role,... picks them); the soak build runs
// them all (TestPlacementMoveFailpointsMatrix).
func TestPlacementMoveFailpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	seed := robustnessSeed(t)
	runMoveCases(t, seed, selectMoveCases(t, rand.New(rand.NewPCG(seed, 0)), 2))
}
