package test

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// failpoint is one kind of fault. Inject puts it in place and returns;
// traffic goes on while it holds; Heal ends it and returns once the fault
// is over (recovery time is measured from there). When measureDuring is
// true the rest of the cluster must also serve while the fault holds, and
// recovery is measured from the fault's start too (a leader's death).
type failpoint interface {
	name() string
	inject(t *testing.T, c *cluster, rng *rand.Rand)
	heal(t *testing.T, c *cluster)
	// measureDuring reports whether a majority remains that must serve
	// while the fault holds.
	measureDuring() bool
}

// returningNode is a failpoint whose victim stays up and comes back when
// the fault heals (frozen or cut off): the suite reads through it at once.
type returningNode interface {
	returning() *node
}

// holdFor is how long a fault stays in place: longer than an election
// timeout (10 ticks of 50 ms, randomised up to twice that) so the cluster
// must react.
const holdFor = 2500 * time.Millisecond

// killFailpoint is kill -9 of the leader of most partitions, or of a
// random node; heal restarts it from its data dir.
type killFailpoint struct {
	leader bool
	victim *node
}

func (f *killFailpoint) name() string {
	if f.leader {
		return "kill-9-leader"
	}
	return "kill-9-random"
}

func (f *killFailpoint) inject(t *testing.T, c *cluster, rng *rand.Rand) {
	f.victim = c.nodes[rng.IntN(len(c.nodes))]
	if f.leader {
		f.victim = c.leaderOfMost()
	}
	t.Logf("%s: node %d", f.name(), f.victim.id)
	c.kill(f.victim)
}

func (f *killFailpoint) heal(t *testing.T, c *cluster) { c.restart(f.victim) }
func (f *killFailpoint) measureDuring() bool           { return true }

// termFailpoint is SIGTERM of the leader of most partitions: a graceful
// stop that hands leadership over; heal restarts it.
type termFailpoint struct{ victim *node }

func (f *termFailpoint) name() string { return "sigterm-leader" }
func (f *termFailpoint) inject(t *testing.T, c *cluster, rng *rand.Rand) {
	f.victim = c.leaderOfMost()
	t.Logf("%s: node %d", f.name(), f.victim.id)
	c.terminate(f.victim, 20*time.Second)
}
func (f *termFailpoint) heal(t *testing.T, c *cluster) { c.restart(f.victim) }
func (f *termFailpoint) measureDuring() bool           { return true }

// stopFailpoint freezes the leader of most partitions with SIGSTOP for
// longer than an election timeout, then wakes it with SIGCONT. The woken
// node still believes it leads until it hears the new term; whatever it
// answers then must not be stale (the history checks catch it).
type stopFailpoint struct{ victim *node }

func (f *stopFailpoint) name() string { return "sigstop-leader" }
func (f *stopFailpoint) inject(t *testing.T, c *cluster, rng *rand.Rand) {
	f.victim = c.leaderOfMost()
	t.Logf("%s: node %d", f.name(), f.victim.id)
	c.signal(f.victim, syscall.SIGSTOP)
}
func (f *stopFailpoint) heal(t *testing.T, c *cluster) { c.signal(f.victim, syscall.SIGCONT) }
func (f *stopFailpoint) returning() *node              { return f.victim }
func (f *stopFailpoint) measureDuring() bool           { return true }

// isolateFailpoint cuts one node (a random one, or the leader of most
// partitions) off from the others through the proxy mesh, both
// directions; clients keep using its ingress. Heal reopens every link.
type isolateFailpoint struct {
	leader bool
	// outboundOnly cuts only what the node sends: it still hears the
	// others but nothing it says (votes, appends, replies) arrives.
	outboundOnly bool
	victim       *node
}

func (f *isolateFailpoint) name() string {
	switch {
	case f.outboundOnly:
		return "partition-leader-outbound"
	case f.leader:
		return "partition-leader"
	}
	return "partition-random"
}

func (f *isolateFailpoint) inject(t *testing.T, c *cluster, rng *rand.Rand) {
	victim := c.nodes[rng.IntN(len(c.nodes))]
	if f.leader {
		victim = c.leaderOfMost()
	}
	t.Logf("%s: node %d", f.name(), victim.id)
	f.victim = victim
	if !f.outboundOnly {
		c.net.isolate(victim.id)
		return
	}
	for _, n := range c.nodes {
		if n != victim {
			c.net.cut(victim.id, n.id)
		}
	}
}
func (f *isolateFailpoint) heal(t *testing.T, c *cluster) { c.net.heal() }
func (f *isolateFailpoint) returning() *node              { return f.victim }
func (f *isolateFailpoint) measureDuring() bool           { return true }

// staleDirFailpoint restarts a node from a copy of its data dir taken in
// the past: stop it gracefully, copy its dir, restart it, let traffic
// commit more, kill -9 it, put the old copy in place and start it. A
// correct cluster either refuses the node or repairs it (the leaders
// overwrite and extend its log); it must never diverge. A refused node is
// brought back the way docs/operations.md tells operators to: from a
// peer's copy taken after the refusal (`raftgate backup`). Its own copy
// from the crash is no good once the stale run acknowledged entries in a
// group whose leader took it for a lagging follower. Heal then kills a
// different node so that the stale one is needed for every majority.
type staleDirFailpoint struct {
	victim, other *node
	// outcome says what the stale node did: "accepted" (and, if the
	// checks pass, repaired) or "refused"; why is the refusal's reason.
	outcome, why string
	// progress waits for more acknowledged traffic.
	progress func(n int)
}

func (f *staleDirFailpoint) name() string { return "stale-data-dir" }

func (f *staleDirFailpoint) inject(t *testing.T, c *cluster, rng *rand.Rand) {
	f.victim = c.nodes[rng.IntN(len(c.nodes))]
	t.Logf("%s: node %d", f.name(), f.victim.id)
	old := f.victim.dataDir + ".past"
	c.terminate(f.victim, 20*time.Second)
	copyDir(t, f.victim.dataDir, old)
	c.restart(f.victim)
	f.progress(100)
	c.kill(f.victim)
	swapDir(t, old, f.victim.dataDir)
	c.start(f.victim)
	if err := c.waitReadyOrExit(f.victim, 30*time.Second); err != nil {
		f.outcome = "refused"
		f.why = panicLine(f.victim.logPath)
		t.Logf("node %d refused its past data dir: %v: %s", f.victim.id, err, f.why)
		c.restoreFromPeer(f.victim)
		return
	}
	f.outcome = "accepted"
}

func (f *staleDirFailpoint) heal(t *testing.T, c *cluster) {
	// With another node down, the stale node is part of every majority and
	// leads some partitions: a diverged log would show in what it serves.
	for _, n := range c.nodes {
		if n != f.victim {
			f.other = n
			break
		}
	}
	// A stale node may pass readiness and be refused a moment later (raft
	// shows the stale log only as heartbeats arrive): wait until it either
	// exits or has applied what the others had when the heal began.
	target, err := c.view(f.other)
	if err != nil {
		t.Fatalf("node %d /cluster: %v", f.other.id, err)
	}
	testutil.WaitFor(t, 30*time.Second, "the stale node to exit or catch up", func() bool {
		if !f.victim.alive() {
			return true
		}
		v, err := c.view(f.victim)
		if err != nil {
			return false
		}
		applied := map[uint32]uint64{}
		for _, p := range v.Partitions {
			applied[p.ID] = p.AppliedIndex
		}
		for _, p := range target.Partitions {
			if applied[p.ID] < p.AppliedIndex {
				return false
			}
		}
		return true
	})
	if !f.victim.alive() {
		// It passed readiness and died after: a refusal too.
		f.outcome, f.why = "refused", panicLine(f.victim.logPath)
		t.Logf("node %d died after starting from its past data dir: %s", f.victim.id, f.why)
		c.restoreFromPeer(f.victim)
		return
	}
	c.kill(f.other)
	f.progress(50)
	c.restart(f.other)
}
func (f *staleDirFailpoint) measureDuring() bool { return false }

// restoreFromPeer replaces stopped node n's data dir by a copy of a
// running peer's, taken with `raftgate backup`, and restarts n from it.
func (c *cluster) restoreFromPeer(n *node) {
	c.t.Helper()
	var peer *node
	for _, p := range c.nodes {
		if p != n && p.alive() {
			peer = p
			break
		}
	}
	if peer == nil {
		c.t.Fatalf("no running peer to restore node %d from", n.id)
	}
	if err := os.RemoveAll(n.dataDir); err != nil {
		c.t.Fatal(err)
	}
	if err := os.MkdirAll(n.dataDir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	out, err := exec.Command(binary, "backup", "--admin", peer.adminURL(), "-o", filepath.Join(n.dataDir, "state.db")).CombinedOutput()
	if err != nil {
		c.t.Fatalf("raftgate backup from node %d: %v\n%s", peer.id, err, out)
	}
	c.t.Logf("node %d restored from node %d: %s", n.id, peer.id, strings.TrimSpace(string(out)))
	c.restart(n)
}

// waitReadyOrExit waits for n's /readyz, returning an error if the process
// exits or the deadline passes.
func (c *cluster) waitReadyOrExit(n *node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			return fmt.Errorf("node %d exited", n.id)
		default:
		}
		if v, err := c.view(n); err == nil && v.Ready {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	return fmt.Errorf("node %d not ready within %v", n.id, timeout)
}

// copyDir replaces dst by a copy of the tree at src.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.RemoveAll(dst); err != nil {
		t.Fatalf("remove %s: %v", dst, err)
	}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// swapDir replaces dst by a copy of src.
func swapDir(t *testing.T, src, dst string) { copyDir(t, src, dst) }

// panicLine returns the first line of a node log that reports a panic or a
// fatal error, with the line after it, or "" if there is none.
func panicLine(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "panic:") || strings.Contains(lines[i], `"level":"fatal"`) || strings.Contains(lines[i], `"level":"panic"`) {
			return strings.Join(lines[i:min(i+2, len(lines))], " | ")
		}
	}
	return "no panic in the log: " + tail(logPath, 3)
}
