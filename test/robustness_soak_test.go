//go:build soak

package test

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// TestRobustnessSoak repeats every failpoint in rounds on one proxied
// cluster until RAFTGATE_SOAK_DURATION (a Go duration, default 10m) has
// passed, then writes the merged table like TestRobustness:
//
//	RAFTGATE_SOAK_DURATION=30m RAFTGATE_ROBUSTNESS_REPORT=$PWD/docs/robustness-table.md \
//	  go test -tags soak ./test -run RobustnessSoak -v -timeout 0
func TestRobustnessSoak(t *testing.T) {
	budget := soakDuration(t)
	seed := robustnessSeed(t)
	t.Logf("seed %d, duration %v", seed, budget)
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions, proxied: true})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)

	fps := allFailpoints()
	rows := make([]row, len(fps))
	end := time.Now().Add(budget)
	for round := 0; time.Now().Before(end) && !t.Failed(); round++ {
		for i, fp := range fps {
			rng := rand.New(rand.NewPCG(seed, uint64(round*len(fps)+i)))
			r := runFailpointRounds(t, c, svc, fp, rng, seed+uint64(round*len(fps)+i)*1000, 1)
			rows[i] = mergeRows(rows[i], r)
		}
	}
	writeReport(t, rows, seed)
}

// soakDuration is RAFTGATE_SOAK_DURATION (a Go duration), 10m if unset.
func soakDuration(t *testing.T) time.Duration {
	s := os.Getenv("RAFTGATE_SOAK_DURATION")
	if s == "" {
		return 10 * time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("RAFTGATE_SOAK_DURATION: %v", err)
	}
	return d
}

func mergeRows(a, b row) row {
	a.failpoint = b.failpoint
	a.rounds += b.rounds
	a.v = mergeVerdicts(a.v, b.v)
	a.recovery = append(a.recovery, b.recovery...)
	a.duringFault = append(a.duringFault, b.duringFault...)
	a.unrecovered += b.unrecovered
	if a.note == "" {
		a.note = b.note
	} else if b.note != "" && b.note != a.note {
		a.note += "; " + b.note
	}
	return a
}
