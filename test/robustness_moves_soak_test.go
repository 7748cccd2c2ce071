//go:build soak

package test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestRobustnessMovesSoak runs the moves scenario (TestRobustnessMoves) in
// rounds of a minute of faults and moves on one cluster, each round
// validated, until RAFTGATE_SOAK_DURATION (default 10m) has passed:
//
//	RAFTGATE_SOAK_DURATION=8m go test -tags soak ./test -run RobustnessMovesSoak -v -timeout 0
func TestRobustnessMovesSoak(t *testing.T) {
	budget := soakDuration(t)
	seed := robustnessSeed(t)
	t.Logf("seed %d (replay with RAFTGATE_ROBUSTNESS_SEED=%d), duration %v", seed, seed, budget)
	c := startMovesCluster(t)
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)

	var total movesRow
	total.moves.refused = map[int]int{}
	faults := map[string]int{}
	end := time.Now().Add(budget)
	for round := 0; time.Now().Before(end) && !t.Failed(); round++ {
		chaos := min(time.Minute, max(time.Until(end), 10*time.Second))
		r := runMovesRound(t, c, svc, rand.New(rand.NewPCG(seed, uint64(round))), seed+uint64(round)*1000, chaos)
		total.rounds++
		total.v = mergeVerdicts(total.v, r.v)
		m := &total.moves
		m.issued += r.moves.issued
		m.accepted += r.moves.accepted
		m.noAnswer += r.moves.noAnswer
		m.finished += r.moves.finished
		m.superseded += r.moves.superseded
		m.overtaken += r.moves.overtaken
		for code, n := range r.moves.refused {
			m.refused[code] += n
		}
		for _, f := range r.faults {
			faults[faultName(f)]++
		}
	}
	t.Logf("moves soak: %d rounds; faults %v", total.rounds, faults)
	t.Logf("moves soak: %s", total.moves)
	v := total.v
	t.Logf("moves soak: ops %d, acknowledged %d, unknown outcome %d, lost %d, wrong %d, multiple results %d, stale 404 %d, key conflicts %d, linearizable %s, service deliveries %d for %d invocations",
		v.ops, v.acked, v.unknown, v.lost, v.wrong, v.multiResults, v.stale404, v.keyConflicts, v.linearizable, v.delivered, v.distinct)
}

// faultName is the failpoint name of a movesRow.faults entry.
func faultName(f string) string { name, _, _ := strings.Cut(f, " "); return name }
