//go:build soak

package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestLazyFSPowerCut puts each node's data dir on its own LazyFS mount (a
// FUSE file system that keeps every write in its own cache until fsync)
// and cuts the power under traffic, first of the node leading most
// partitions, then of the whole cluster: the nodes are killed with
// SIGKILL, then LazyFS drops everything they had not synced
// ("lazyfs::clear-cache"), and they restart on the same mounts. Every
// acknowledged invocation must still be there with exactly its own result,
// and the replicas must converge with equal state digests.
//
// It needs root (FUSE) and a LazyFS binary: RAFTGATE_LAZYFS names it, or
// lazyfs is on PATH (docs/robustness.md, "Power cuts on LazyFS").
func TestLazyFSPowerCut(t *testing.T) {
	bin := lazyFSBinary(t)
	seed := robustnessSeed(t)
	t.Logf("seed %d (replay with RAFTGATE_ROBUSTNESS_SEED=%d)", seed, seed)
	dir := t.TempDir()
	mounts := map[int]*lazyFS{}
	for id := 1; id <= 3; id++ {
		mounts[id] = mountLazyFS(t, bin, dir, fmt.Sprintf("node%d", id))
	}
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions,
		dataDir: func(id int) string { return filepath.Join(mounts[id].mnt, "data") }})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)
	// One node cut at a random moment, then exactly between a log write
	// and its fdatasync, then inside a state checkpoint's commit (through
	// RAFTGATE_FAILPOINT); then the whole cluster at a random moment, and
	// as soon as one node died between a log write and its fdatasync.
	cuts := []struct {
		name      string
		whole     bool
		failpoint *crashRound
	}{
		{name: "one-node"},
		{name: "one-node-after-log-write", failpoint: &crashRound{failpoint: "after-log-write", leader: true, hits: "raftgate_wal_batch_entries_count"}},
		{name: "one-node-during-checkpoint", failpoint: &crashRound{failpoint: "during-checkpoint", hits: "raftgate_checkpoint_seconds_count"}},
		{name: "whole-cluster", whole: true},
		{name: "whole-cluster-after-log-write", whole: true, failpoint: &crashRound{failpoint: "after-log-write", hits: "raftgate_wal_batch_entries_count"}},
	}
	for i, cut := range cuts {
		t.Run(cut.name, func(t *testing.T) {
			parent := c.t
			c.t = t
			defer func() { c.t = parent }()
			victims := []*node{c.leaderOfMost()}
			switch {
			case cut.whole:
				victims = c.nodes
			case cut.failpoint != nil && cut.failpoint.leader:
				victims = []*node{preferredOfMost(c)}
			}
			runPowerCut(t, c, mounts, svc, victims, cut.failpoint, seed+uint64(i)*1000)
		})
		if t.Failed() {
			return
		}
	}
}

// runPowerCut cuts the power of victims under traffic: a kill -9 (with
// fp, the first victim's own at fp's boundary, then the others'), then
// LazyFS drops what they had not synced; they restart on their mounts and
// the history is checked.
func runPowerCut(t *testing.T, c *cluster, mounts map[int]*lazyFS, svc *recorder, victims []*node, fp *crashRound, seed uint64) {
	c.ensureAllUp()
	distinct0, delivered0 := svc.stats()
	rt := startRoundTraffic(t, c, seed, 60*time.Second)
	defer rt.end()
	rec, progress := rt.rec, rt.progress
	progress(100)

	// Kill first, then clear: a dead process syncs nothing more, so what
	// LazyFS drops is exactly what was not synced when the power went.
	if fp != nil {
		crashAt(t, c, victims[0], *fp, progress, seed)
	}
	for _, v := range victims {
		c.signal(v, syscall.SIGKILL)
	}
	var ids []int
	for _, v := range victims {
		<-v.exited
		ids = append(ids, v.id)
	}
	for i, v := range victims {
		fs := mounts[v.id]
		dropped := fs.unsyncedBytes(t)
		t.Logf("power cut of node %d: %d bytes not synced are dropped", v.id, dropped)
		if dropped == 0 && i == 0 && fp != nil && fp.failpoint == "after-log-write" {
			t.Errorf("node %d died between a log write and its fdatasync, yet LazyFS held nothing unsynced: this cut tests nothing", v.id)
		}
		fs.clearCache(t)
	}
	for _, v := range victims {
		c.start(v)
	}
	for _, v := range victims {
		c.waitReady(v, 60*time.Second)
	}
	t.Logf("nodes %v restarted on their mounts", ids)
	progress(100)
	rt.end()

	if applied, err := c.waitConverged(30 * time.Second); err != nil {
		t.Errorf("power cut of %v: %v", ids, err)
	} else {
		t.Logf("power cut of %v: replicas converged at applied indexes %v with equal state digests", ids, applied)
	}
	readThroughOtherNodes(rt.traffic)
	name := fmt.Sprintf("power cut of nodes %v", ids)
	out := row{failpoint: name, v: validate(c, rec, svc, "Echo")}
	out.v.distinct -= distinct0
	out.v.delivered -= delivered0
	report(t, name, out)
	if t.Failed() {
		dumpRecording(t, rec)
	}
}

// lazyFSBinary is RAFTGATE_LAZYFS, or lazyfs on PATH; the test is skipped
// without one.
func lazyFSBinary(t *testing.T) string {
	if p := os.Getenv("RAFTGATE_LAZYFS"); p != "" {
		return p
	}
	if p, err := exec.LookPath("lazyfs"); err == nil {
		return p
	}
	t.Skip("no LazyFS: build it (as root) with tools/lazyfs/build.sh and set RAFTGATE_LAZYFS to the path it prints")
	return ""
}

// lazyFS is one LazyFS mount at mnt over a directory of its own. Writing
// "lazyfs::clear-cache" to its fifo drops every write not yet synced: a
// power cut for the files under mnt.
type lazyFS struct {
	mnt, fifo, logPath string
	cmd                *exec.Cmd
	exited             chan struct{}
}

// mountLazyFS mounts a LazyFS named name under dir, in the foreground so
// that the test owns the process, and unmounts it in cleanup (registered
// after the mount, so it runs after the nodes were stopped).
func mountLazyFS(t *testing.T, bin, dir, name string) *lazyFS {
	t.Helper()
	root, mnt := filepath.Join(dir, name+".root"), filepath.Join(dir, name+".mnt")
	for _, d := range []string{root, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fs := &lazyFS{mnt: mnt, fifo: filepath.Join(dir, name+".fifo"), logPath: filepath.Join(dir, name+".lazyfs.log"), exited: make(chan struct{})}
	cfg := filepath.Join(dir, name+".toml")
	// The cache holds everything written since the mount (two 64 MiB log
	// segments, state.db): eviction would write back unsynced data.
	conf := fmt.Sprintf("[faults]\nfifo_path=%q\n\n[cache]\napply_eviction=false\n\n[cache.simple]\ncustom_size=\"1gb\"\nblocks_per_page=1\n\n[filesystem]\nlog_all_operations=false\nlogfile=%q\n",
		fs.fifo, fs.logPath)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, name+".lazyfs.out"))
	if err != nil {
		t.Fatal(err)
	}
	fs.cmd = exec.Command(bin, mnt, "--config-path", cfg, "-o", "allow_other", "-o", "modules=subdir", "-o", "subdir="+root, "-f")
	fs.cmd.Stdout, fs.cmd.Stderr = out, out
	fs.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := fs.cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start LazyFS: %v", err)
	}
	go func() {
		fs.cmd.Wait()
		out.Close()
		close(fs.exited)
	}()
	t.Cleanup(fs.unmount)
	testutil.WaitFor(t, 30*time.Second, "LazyFS mounted at "+mnt, func() bool {
		select {
		case <-fs.exited:
			t.Fatalf("LazyFS exited while mounting:\n%s", tail(out.Name(), 20))
		default:
		}
		return isMounted(mnt)
	})
	return fs
}

// isMounted reports whether a FUSE file system is mounted at dir.
func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == dir && strings.HasPrefix(f[2], "fuse") {
			return true
		}
	}
	return false
}

// unmount unmounts fs and waits for LazyFS to exit, killing it (and
// detaching the mount) if it does not.
func (fs *lazyFS) unmount() {
	exec.Command("fusermount3", "-u", fs.mnt).Run()
	select {
	case <-fs.exited:
		return
	case <-time.After(10 * time.Second):
	}
	syscall.Kill(-fs.cmd.Process.Pid, syscall.SIGKILL)
	<-fs.exited
	exec.Command("fusermount3", "-u", "-z", fs.mnt).Run()
}

// command writes one command to fs's fifo and waits until its log has one
// more line matching done; it returns that line's submatches.
func (fs *lazyFS) command(t *testing.T, cmd string, done *regexp.Regexp) []string {
	t.Helper()
	before := len(done.FindAllStringSubmatch(readFile(fs.logPath), -1))
	// Non-blocking: with no LazyFS reading the fifo the open fails at once.
	f, err := os.OpenFile(fs.fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("LazyFS fifo %s: %v", fs.fifo, err)
	}
	_, err = f.WriteString(cmd + "\n")
	f.Close()
	if err != nil {
		t.Fatalf("LazyFS fifo %s: %v", fs.fifo, err)
	}
	var match []string
	testutil.WaitFor(t, 30*time.Second, "LazyFS to run "+cmd, func() bool {
		all := done.FindAllStringSubmatch(readFile(fs.logPath), -1)
		if len(all) > before {
			match = all[len(all)-1]
			return true
		}
		return false
	})
	return match
}

var (
	lazyFSCleared  = regexp.MustCompile(`cache is cleared`)
	lazyFSUnsynced = regexp.MustCompile(`total number of bytes un-fsynced: (\d+) bytes|all data blocks are synced`)
)

// clearCache drops every write not yet synced.
func (fs *lazyFS) clearCache(t *testing.T) { fs.command(t, "lazyfs::clear-cache", lazyFSCleared) }

// unsyncedBytes is how much written data LazyFS holds unsynced.
func (fs *lazyFS) unsyncedBytes(t *testing.T) int64 {
	m := fs.command(t, "lazyfs::unsynced-data-report", lazyFSUnsynced)
	n, _ := strconv.ParseInt(m[1], 10, 64) // "" when all is synced
	return n
}

// readFile returns the file's content, "" if it cannot be read.
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
