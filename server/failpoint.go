package server

// Crash-test failpoints: RAFTGATE_FAILPOINT=name[@N] makes a server kill
// itself with SIGKILL at a durability boundary of its storage, or at a
// step of a Raft configuration change or of a partition's move, so that
// the process tests (test/crash_failpoints_test.go,
// test/membership_failpoints_test.go, test/placement_failpoints_test.go)
// can check what a restart recovers after a real kill -9 right there. For
// the end-to-end tests only: a node started with one says so loudly
// (docs/robustness.md, "Crash failpoints"), and a program embedding a
// node leaves Config.Failpoint nil.

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/raftlog"
)

// Environment variables of the failpoints, read by `raftgate server`;
// neither is a flag.
const (
	FailpointEnv     = "RAFTGATE_FAILPOINT"
	FailpointSeedEnv = "RAFTGATE_FAILPOINT_SEED"
)

// failpointHits is, per failpoint name, the range the hit that kills is
// drawn from when the spec gives no @N: log writes come by the hundred per
// second under load, checkpoints every 100 ms (raftlog's default).
var failpointHits = map[string][2]int64{
	"before-log-write":  {100, 1000},
	"after-log-write":   {100, 1000},
	"after-log-sync":    {100, 1000},
	"during-checkpoint": {10, 100},
	// The steps of a configuration change (raftlog.Knobs.AtConfChange):
	// a join, a removal or a partition's move takes each once per group.
	// "before-" is the group's leader about to propose the step, "after-"
	// each replica that applied it, before raft does.
	"before-add-learner": {1, 1},
	"after-add-learner":  {1, 1},
	"before-enter-joint": {1, 1},
	"after-enter-joint":  {1, 1},
	"before-leave-joint": {1, 1},
	"after-leave-joint":  {1, 1},
	"before-remove":      {1, 1},
	"after-remove":       {1, 1},
	// A blank replica (a joining node's) installing its first snapshot,
	// before the install is durable.
	"during-snapshot": {1, 1},
	// Between two durable steps of a snapshot's load into the staging
	// bucket (steps of failpointInstallStep bytes, so that even a small
	// snapshot takes several).
	"during-snapshot-load": {1, 1},
	// A node deleting its replica that left the group (RemoveGroup): its
	// state is deleted, its log not yet dropped.
	"during-remove-group": {1, 1},
	// Recording a move's result (the group's configuration now its
	// target) in the cluster record: the group's leader about to send it,
	// and the metadata leader once it is committed, before it answers.
	"before-record": {1, 1},
	"after-record":  {1, 1},
	// A joining node that has its id from the cluster but has not written
	// it to its identity file (reach, in join).
	"after-join-reply": {1, 1},
}

// failpointInstallStep is the snapshot load step under the
// during-snapshot-load failpoint.
const failpointInstallStep = 4 << 10

// maxCheckpointKillDelay bounds the delay between the during-checkpoint
// hit and the kill: long enough to land inside bbolt's commit (its page
// writes and two fdatasyncs), sometimes before it, sometimes after.
const maxCheckpointKillDelay = 3 * time.Millisecond

// Failpoint is a parsed RAFTGATE_FAILPOINT.
type Failpoint struct {
	name string
	// killAt is the hit of the boundary that kills the process (1 = the
	// first).
	killAt int64
	seed   uint64
	rng    *rand.Rand
	hits   atomic.Int64
	// kill is killSelf; unit tests count calls instead.
	kill func()
}

// ParseFailpoint reads spec ("name" or "name@N") and seedText (empty: a
// seed from the clock, which the start-up warning prints).
func ParseFailpoint(spec, seedText string) (*Failpoint, error) {
	name, at, hasAt := strings.Cut(strings.TrimSpace(spec), "@")
	hits, ok := failpointHits[name]
	if !ok {
		return nil, fmt.Errorf("%s=%q: unknown failpoint %q; want one of %s, optionally with @N (the N-th hit kills)",
			FailpointEnv, spec, name, strings.Join(slices.Sorted(maps.Keys(failpointHits)), ", "))
	}
	seed := uint64(time.Now().UnixNano())
	if seedText != "" {
		s, err := strconv.ParseUint(seedText, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: not an unsigned integer", FailpointSeedEnv, seedText)
		}
		seed = s
	}
	fp := &Failpoint{name: name, seed: seed, rng: rand.New(rand.NewPCG(seed, 0)), kill: killSelf}
	if hasAt {
		n, err := strconv.ParseInt(at, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: @%s is not a hit count of at least 1", FailpointEnv, spec, at)
		}
		fp.killAt = n
	} else {
		fp.killAt = hits[0] + fp.rng.Int64N(hits[1]-hits[0]+1)
	}
	return fp, nil
}

// warn says, at start, that this process will kill itself.
func (fp *Failpoint) warn(log zerolog.Logger) {
	log.Warn().Str("failpoint", fp.name).Int64("kill_at_hit", fp.killAt).Uint64("seed", fp.seed).
		Msg(FailpointEnv + " is set: this process KILLS ITSELF with SIGKILL at a storage durability boundary or a configuration change step; for crash tests only, never in production")
}

// knobs returns the raftlog hooks that count hits of fp's boundary; nil
// when fp is nil (no failpoint).
func (fp *Failpoint) knobs(log zerolog.Logger) *raftlog.Knobs {
	if fp == nil {
		return nil
	}
	hit := func() {
		if fp.hits.Add(1) == fp.killAt {
			log.Warn().Str("failpoint", fp.name).Int64("hit", fp.killAt).Msg("failpoint reached: kill -9")
			fp.kill()
		}
	}
	k := &raftlog.Knobs{}
	switch fp.name {
	case "before-log-write":
		k.BeforeLogWrite = hit
	case "after-log-write":
		k.AfterLogWrite = hit
	case "after-log-sync":
		k.AfterLogSync = hit
	case "during-checkpoint":
		// The hook runs just before the commit; the kill comes from a timer
		// so that the commit is under way when it lands.
		delay := time.Duration(fp.rng.Int64N(int64(maxCheckpointKillDelay) + 1))
		k.DuringCheckpoint = func() {
			if fp.hits.Add(1) == fp.killAt {
				log.Warn().Str("failpoint", fp.name).Int64("hit", fp.killAt).Dur("after", delay).Msg("failpoint reached: kill -9 during the commit")
				time.AfterFunc(delay, fp.kill)
			}
		}
	case "during-snapshot":
		k.DuringSnapshotInstall = func(raftlog.GroupID) { hit() }
	case "during-snapshot-load":
		// Between the durable steps of a snapshot's load: a staged, partly
		// loaded state is on disk.
		k.AfterInstallStep = func(raftlog.GroupID) { hit() }
		k.InstallStepBytes = failpointInstallStep
	case "during-remove-group":
		k.AfterRemoveState = func() error { hit(); return nil }
	case "after-join-reply", "before-record", "after-record":
		// Not raftlog's: the server calls reach.
	default: // a configuration change step, named as raftlog names it
		k.AtConfChange = func(_ raftlog.GroupID, point string) error {
			if point == fp.name {
				hit()
			}
			return nil
		}
	}
	return k
}

// reach counts a hit of the failpoint name that the server itself passes
// (not a raftlog knob); nil-safe.
func (fp *Failpoint) reach(name string, log zerolog.Logger) {
	if fp == nil || fp.name != name {
		return
	}
	if fp.hits.Add(1) == fp.killAt {
		log.Warn().Str("failpoint", fp.name).Int64("hit", fp.killAt).Msg("failpoint reached: kill -9")
		fp.kill()
	}
}

// killSelf is a real kill -9 of this process. The calling goroutine blocks
// so that it does nothing more while the signal lands.
func killSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
