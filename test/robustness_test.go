package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// The robustness suite follows etcd's tests/robustness: traffic →
// failpoint → history → validate. One proxied three-node cluster serves
// every failpoint in turn; each failpoint gets its own recording, checked
// once the fault has healed and traffic stopped.
//
// RAFTGATE_ROBUSTNESS_SEED fixes the random choices (victims, traffic mix);
// RAFTGATE_ROBUSTNESS_REPORT names a markdown file to write the table to.

// robustnessPartitions is the partition count of the suite's cluster.
const robustnessPartitions = 4

// row is one failpoint run's line of the report.
type row struct {
	failpoint   string
	rounds      int
	v           verdict
	recovery    []time.Duration // fault end → first success, per partition
	duringFault []time.Duration // fault start (a node's death) → first success while it holds
	unrecovered int             // partitions with no success within the probe deadline
	note        string
}

// allFailpoints returns a fresh instance of every failpoint.
func allFailpoints() []failpoint {
	return []failpoint{
		&killFailpoint{leader: true},
		&killFailpoint{},
		&termFailpoint{},
		&stopFailpoint{},
		&isolateFailpoint{},
		&isolateFailpoint{leader: true},
		&isolateFailpoint{leader: true, outboundOnly: true},
		&staleDirFailpoint{},
	}
}

func robustnessSeed(t testing.TB) uint64 {
	if s := os.Getenv("RAFTGATE_ROBUSTNESS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RAFTGATE_ROBUSTNESS_SEED: %v", err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

func TestRobustness(t *testing.T) {
	if testing.Short() {
		t.Skip("robustness suite skipped in -short mode")
	}
	seed := robustnessSeed(t)
	t.Logf("seed %d (replay with RAFTGATE_ROBUSTNESS_SEED=%d)", seed, seed)
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions, proxied: true})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)

	var rows []row
	for i, fp := range allFailpoints() {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		if r := runFailpointRounds(t, c, svc, fp, rng, seed+uint64(i)*1000, 1); r.rounds > 0 {
			rows = append(rows, r)
		}
	}
	writeReport(t, rows, seed)
}

// runFailpointRounds runs fp `rounds` times in a subtest on the shared
// cluster and returns the merged row.
func runFailpointRounds(t *testing.T, c *cluster, svc *recorder, fp failpoint, rng *rand.Rand, seed uint64, rounds int) row {
	out := row{failpoint: fp.name()}
	t.Run(fp.name(), func(t *testing.T) {
		parent := c.t
		c.t = t
		defer func() { c.t = parent }()
		for round := 0; round < rounds; round++ {
			r := runFailpoint(t, c, svc, fp, rng, seed+uint64(round))
			out.rounds++
			out.v = mergeVerdicts(out.v, r.v)
			out.recovery = append(out.recovery, r.recovery...)
			out.duringFault = append(out.duringFault, r.duringFault...)
			out.unrecovered += r.unrecovered
			if r.note != "" && !strings.Contains(out.note, r.note) {
				out.note = strings.TrimPrefix(out.note+"; "+r.note, "; ")
			}
			if t.Failed() {
				return
			}
		}
	})
	return out
}

// roundTraffic is the suite's traffic for one round: what it recorded,
// progress (wait for n more acknowledgements) and end (stop it and wait for
// it; safe to call twice).
type roundTraffic struct {
	traffic  *traffic
	rec      *recording
	end      func()
	progress func(n int)
}

// startRoundTraffic starts the suite's traffic (6 clients against Echo);
// progress waits at most progressTimeout.
func startRoundTraffic(t *testing.T, c *cluster, seed uint64, progressTimeout time.Duration) roundTraffic {
	rec := newRecording()
	tr := &traffic{c: c, service: "Echo", rec: rec, seed: seed, attemptTimeout: 4 * time.Second}
	ctx, stop := context.WithCancel(context.Background())
	wait := tr.run(ctx, 6)
	ackedNow := func() int { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.acked) }
	return roundTraffic{
		traffic: tr,
		rec:     rec,
		end:     func() { stop(); wait() },
		progress: func(n int) {
			before := ackedNow()
			testutil.WaitFor(t, progressTimeout, fmt.Sprintf("%d more acknowledgements", n), func() bool { return ackedNow() >= before+n })
		},
	}
}

// runFailpoint is one traffic → failpoint → history → validate cycle.
func runFailpoint(t *testing.T, c *cluster, svc *recorder, fp failpoint, rng *rand.Rand, seed uint64) row {
	c.ensureAllUp()
	distinct0, delivered0 := svc.stats()
	rt := startRoundTraffic(t, c, seed, 30*time.Second)
	defer rt.end()
	rec, progress := rt.rec, rt.progress
	tr := rt.traffic
	if sd, ok := fp.(*staleDirFailpoint); ok {
		sd.progress = progress
	}
	progress(30)

	out := row{failpoint: fp.name()}
	fp.inject(t, c, rng)
	injected := time.Now()
	probe := &traffic{c: c, service: "Echo", rec: rec, seed: seed, attemptTimeout: time.Second}
	if fp.measureDuring() {
		d, missing := measureRecovery(probe, fmt.Sprintf("%s-%d-during", fp.name(), seed), injected)
		out.duringFault, out.unrecovered = d, out.unrecovered+missing
	}
	waitBurst := func() {}
	if rn, ok := fp.(returningNode); ok {
		waitBurst = tr.submitBurst(rn.returning(), 8, holdFor+3*time.Second)
	}
	if rest := holdFor - time.Since(injected); rest > 0 {
		time.Sleep(rest) // the fault's duration, not synchronisation
	}
	fp.heal(t, c)
	healed := time.Now()
	if rn, ok := fp.(returningNode); ok {
		tr.readBurst(rn.returning(), 20)
	}
	d, missing := measureRecovery(probe, fmt.Sprintf("%s-%d-heal", fp.name(), seed), healed)
	out.recovery, out.unrecovered = d, out.unrecovered+missing
	if missing > 0 {
		t.Errorf("%s: %d partitions served no request within %v of the fault's end", fp.name(), missing, probeDeadline)
	}
	progress(30)
	waitBurst()
	rt.end()

	if sd, ok := fp.(*staleDirFailpoint); ok {
		out.note = "stale node " + sd.outcome
		if sd.why != "" {
			t.Logf("%s: the node's refusal: %s", fp.name(), sd.why)
		}
	}
	if applied, err := c.waitConverged(30 * time.Second); err != nil {
		t.Errorf("%s: %v", fp.name(), err)
		out.note = strings.TrimPrefix(out.note+"; replicas diverged", "; ")
	} else {
		t.Logf("%s: replicas converged at applied indexes %v with equal state digests", fp.name(), applied)
	}
	if rn, ok := fp.(returningNode); ok {
		t.Logf("%s: answers through node %d while the fault held: %s", fp.name(), rn.returning().id,
			answersVia(rec, rn.returning(), injected, healed))
	}
	out.v = validate(c, rec, svc, "Echo")
	out.v.distinct -= distinct0
	out.v.delivered -= delivered0
	report(t, fp.name(), out)
	if t.Failed() {
		dumpRecording(t, rec)
	}
	return out
}

// probeDeadline bounds how long recovery probes wait for a partition.
const probeDeadline = 30 * time.Second

// measureRecovery sends one idempotent invocation per partition (keys
// chosen so that each partition is hit) until each is acknowledged, and
// returns the time from `from` to each acknowledgement.
func measureRecovery(probe *traffic, prefix string, from time.Time) (took []time.Duration, missing int) {
	keys := probeKeys(probe.service, "echo", prefix, robustnessPartitions)
	ctx, cancel := context.WithTimeout(context.Background(), probeDeadline)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 0))
			o := &op{Client: -int(p), Kind: kindSend, Key: key, Payload: fmt.Sprintf("%q", "probe-"+key)}
			probe.submit(ctx, rng, o, nil)
			mu.Lock()
			defer mu.Unlock()
			if o.Acked {
				took = append(took, o.End.Sub(from))
			} else {
				missing++
			}
		}()
	}
	wg.Wait()
	slices.Sort(took)
	return took, missing
}

func mergeVerdicts(a, b verdict) verdict {
	a.ops += b.ops
	a.acked += b.acked
	a.unknown += b.unknown
	a.lost += b.lost
	a.wrong += b.wrong
	a.multiResults += b.multiResults
	a.stale404 += b.stale404
	a.keyConflicts += b.keyConflicts
	a.neverDelivered += b.neverDelivered
	a.distinct += b.distinct
	a.delivered += b.delivered
	if a.linearizable == "" || b.linearizable != "Ok" {
		a.linearizable = b.linearizable
	}
	a.problems = append(a.problems, b.problems...)
	return a
}

// report logs a run's findings and fails the test on any violation.
func report(t *testing.T, name string, r row) {
	reportVerdict(t, name, r.v)
	t.Logf("%s: recovery after fault end p50 %v max %v; during the fault (from its start) p50 %v max %v",
		name, pct(r.recovery, 50), pct(r.recovery, 100), pct(r.duringFault, 50), pct(r.duringFault, 100))
}

// reportVerdict logs what validation found and fails the test on any
// violation.
func reportVerdict(t *testing.T, name string, v verdict) {
	t.Logf("%s: ops %d, acknowledged %d, unknown outcome %d, lost %d, wrong %d, multiple results %d, stale 404 %d, key conflicts %d, never delivered %d, linearizable %s; service deliveries %d for %d invocations",
		name, v.ops, v.acked, v.unknown, v.lost, v.wrong, v.multiResults, v.stale404, v.keyConflicts, v.neverDelivered, v.linearizable, v.delivered, v.distinct)
	for _, p := range v.problems {
		t.Errorf("%s: %s", name, p)
	}
}

// pct returns the p-th percentile of sorted durations, 0 if none.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	i := (len(d) - 1) * p / 100
	return d[i].Round(time.Millisecond)
}

// dumpRecording writes the history as JSON under RAFTGATE_E2E_LOGDIR.
func dumpRecording(t *testing.T, rec *recording) {
	dir := os.Getenv("RAFTGATE_E2E_LOGDIR")
	if dir == "" {
		return
	}
	rec.mu.Lock()
	b, err := json.MarshalIndent(rec.ops, "", " ")
	rec.mu.Unlock()
	if err != nil {
		return
	}
	path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-history.json")
	if os.WriteFile(path, b, 0o644) == nil {
		t.Logf("history kept at %s", path)
	}
}

// writeReport writes the markdown table to RAFTGATE_ROBUSTNESS_REPORT.
func writeReport(t *testing.T, rows []row, seed uint64) {
	var b strings.Builder
	fmt.Fprintf(&b, "| failpoint | rounds | operations | acknowledged | unknown outcome | lost | wrong or multiple results | stale 404 | duplicate deliveries | recovery after fault end p50 / max | during the fault, from its start, p50 / max | linearizable | note |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		v := r.v
		dist, del := v.distinct, v.delivered
		dup := "0"
		if dist > 0 {
			dup = fmt.Sprintf("%d (%.2f%%)", del-dist, 100*float64(del-dist)/float64(dist))
		}
		death := "—"
		if len(r.duringFault) > 0 {
			death = fmt.Sprintf("%v / %v", pct(r.duringFault, 50), pct(r.duringFault, 100))
		}
		rec := fmt.Sprintf("%v / %v", pct(r.recovery, 50), pct(r.recovery, 100))
		if r.unrecovered > 0 {
			rec += fmt.Sprintf(" (%d partitions not recovered)", r.unrecovered)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n",
			r.failpoint, r.rounds, v.ops, v.acked, v.unknown, v.lost, v.wrong+v.multiResults, v.stale404, dup, rec, death, v.linearizable, r.note)
	}
	fmt.Fprintf(&b, "\nseed %d, %s\n", seed, time.Now().UTC().Format(time.RFC3339))
	t.Logf("robustness table:\n%s", b.String())
	if path := os.Getenv("RAFTGATE_ROBUSTNESS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Errorf("writing report: %v", err)
		}
	}
}

// answersVia summarises the attempts started through node n in [from, to]:
// what the faulty node's own ingress told clients during the fault (those
// answered after `to` are counted apart).
func answersVia(rec *recording, n *node, from, to time.Time) string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	counts := map[string]int{}
	for _, o := range rec.ops {
		for _, a := range o.Attempts {
			if a.Node != n.id || a.Start.Before(from) || a.Start.After(to) {
				continue
			}
			if a.End.After(to) {
				counts[fmt.Sprintf("%s answered after heal", o.Kind)]++
				continue
			}
			k := fmt.Sprintf("%s %d", o.Kind, a.Status)
			if a.Err != "" {
				k = fmt.Sprintf("%s error(…%s)", o.Kind, a.Err[max(0, len(a.Err)-40):])
			}
			counts[k]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s×%d ", k, counts[k])
	}
	return b.String()
}
