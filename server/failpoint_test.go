package server

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/internal/testutil"
)

func TestParseFailpoint(t *testing.T) {
	for _, tc := range []struct {
		spec, seed string
		name       string
		killAt     int64 // 0: drawn from the name's range
		err        string
	}{
		{spec: "before-log-write@1", name: "before-log-write", killAt: 1},
		{spec: "after-log-write@250", name: "after-log-write", killAt: 250},
		{spec: "after-log-sync", seed: "7", name: "after-log-sync"},
		{spec: "during-checkpoint", seed: "7", name: "during-checkpoint"},
		{spec: "before-log-sync", err: "unknown failpoint"},
		{spec: "after-log-sync@0", err: "at least 1"},
		{spec: "after-log-sync@x", err: "at least 1"},
		{spec: "after-log-sync", seed: "-1", err: FailpointSeedEnv},
	} {
		fp, err := ParseFailpoint(tc.spec, tc.seed)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if fp.name != tc.name {
			t.Errorf("%q: name %q, want %q", tc.spec, fp.name, tc.name)
		}
		if r := failpointHits[tc.name]; tc.killAt == 0 && (fp.killAt < r[0] || fp.killAt > r[1]) {
			t.Errorf("%q: kill at hit %d, outside %v", tc.spec, fp.killAt, r)
		} else if tc.killAt != 0 && fp.killAt != tc.killAt {
			t.Errorf("%q: kill at hit %d, want %d", tc.spec, fp.killAt, tc.killAt)
		}
		if again, _ := ParseFailpoint(tc.spec, tc.seed); tc.seed != "" && again.killAt != fp.killAt {
			t.Errorf("%q with seed %s: kill at hit %d, then %d", tc.spec, tc.seed, fp.killAt, again.killAt)
		}
	}
}

// TestFailpointKillsAtTheNthHit checks that each name is wired to its own
// raftlog knob, and only the N-th hit kills.
func TestFailpointKillsAtTheNthHit(t *testing.T) {
	for name := range failpointHits {
		fp, err := ParseFailpoint(name+"@3", "1")
		if err != nil {
			t.Fatal(err)
		}
		var kills atomic.Int32
		fp.kill = func() { kills.Add(1) }
		k := fp.knobs(zerolog.Nop())
		hooks := map[string]func(){
			"before-log-write": k.BeforeLogWrite, "after-log-write": k.AfterLogWrite,
			"after-log-sync": k.AfterLogSync, "during-checkpoint": k.DuringCheckpoint,
		}
		for _, reached := range []string{"after-join-reply", "before-record", "after-record"} {
			hooks[reached] = func() { fp.reach(reached, zerolog.Nop()) }
		}
		if k.AfterRemoveState != nil {
			hooks["during-remove-group"] = func() { _ = k.AfterRemoveState() }
		}
		if k.DuringSnapshotInstall != nil {
			hooks["during-snapshot"] = func() { k.DuringSnapshotInstall(1) }
		}
		if k.AfterInstallStep != nil {
			hooks["during-snapshot-load"] = func() { k.AfterInstallStep(1) }
		}
		if k.AtConfChange != nil {
			for _, step := range []string{"add-learner", "enter-joint", "leave-joint", "remove"} {
				for _, point := range []string{"before-" + step, "after-" + step} {
					hooks[point] = func() { _ = k.AtConfChange(1, point) }
				}
			}
			// Other points never count.
			for _, other := range []string{"applied-enter-joint", "applied-remove", "before-conf-change"} {
				_ = k.AtConfChange(1, other)
			}
		}
		for hookName, hook := range hooks {
			if hook == nil {
				delete(hooks, hookName)
				continue
			}
			if hookName == name {
				continue
			}
			// Another boundary's hits must not count toward name's.
			for range 5 {
				hook()
			}
		}
		if hooks[name] == nil {
			t.Fatalf("%s: no knob set", name)
		}
		hooks[name]()
		hooks[name]()
		if n := kills.Load(); n != 0 {
			t.Fatalf("%s: killed before its third hit", name)
		}
		for range 3 {
			hooks[name]()
		}
		testutil.WaitFor(t, time.Second, name+" to kill once", func() bool { return kills.Load() == 1 })
		if n := kills.Load(); n != 1 {
			t.Errorf("%s: %d kills after 5 hits, want 1", name, n)
		}
	}
	var none *Failpoint
	if none.knobs(zerolog.Nop()) != nil {
		t.Error("no failpoint: knobs not nil")
	}
}
