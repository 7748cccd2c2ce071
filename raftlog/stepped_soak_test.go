//go:build soak

package raftlog

import (
	"fmt"
	"slices"
	"testing"
)

// TestSteppedRunsSoak: many seeds of steppedRun, each checked for log
// matching (its replay is TestSteppedRunReplays's job).
//
//	go test -tags soak -run TestSteppedRunsSoak ./raftlog
func TestSteppedRunsSoak(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			_, entries := steppedRun(t, seed, 3000)
			var longest []string
			for _, e := range entries {
				if len(e) > len(longest) {
					longest = e
				}
			}
			for id, e := range entries {
				if !slices.Equal(e, longest[:len(e)]) {
					t.Fatalf("seed %d: node %d applied %v, not a prefix of %v", seed, id, e, longest)
				}
			}
		})
	}
}
