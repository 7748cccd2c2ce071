package test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondProcessOnLiveDataDir: a second server started on a data dir a
// live node has open (other ports, the same --data-dir) exits at once with
// a message naming the dir and its holder, and leaves every file of the
// live node as it was: no recovery of the log, no spool clean-up, no take
// over of a preallocated segment.
func TestSecondProcessOnLiveDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	c := startCluster(t, clusterOpts{nodes: 1, partitions: 2})
	n := c.nodes[0]
	rec := newRecorder(t)
	c.registerService(n, "Echo", rec.srv.URL)
	for i := range 20 {
		r, err := do(context.Background(), http.MethodPost, n.ingressURL()+"/Echo/echo/send", []byte(`"x"`),
			map[string]string{"idempotency-key": fmt.Sprintf("k-%d", i)})
		if err != nil || r.status != http.StatusAccepted {
			t.Fatalf("send %d: %v %+v", i, err, r)
		}
	}
	// Stopped, the node writes nothing while the second process runs, so
	// any change to its files is the second process's doing.
	c.signal(n, syscall.SIGSTOP)
	before := dirDigest(t, n.dataDir)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodeAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	out, err := exec.CommandContext(ctx, binary, "server", "--node-id", "1", "--data-dir", n.dataDir,
		"--partitions", "2",
		"--ingress-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--node-addr", nodeAddr,
		"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--initial-cluster", "1="+nodeAddr).CombinedOutput()
	if err == nil {
		t.Fatalf("a second process on a live data dir started:\n%s", out)
	}
	want := fmt.Sprintf("%s is open in another raftgate process (pid %d)", n.dataDir, n.cmd.Process.Pid)
	if !strings.Contains(string(out), want) {
		t.Errorf("the second process's output does not say %q:\n%s", want, out)
	}
	after := dirDigest(t, n.dataDir)
	for path, sum := range before {
		if after[path] != sum {
			t.Errorf("%s changed under the live node (%s → %s)", path, sum, after[path])
		}
	}
	for path := range after {
		if _, ok := before[path]; !ok {
			t.Errorf("%s appeared under the live node", path)
		}
	}
	c.signal(n, syscall.SIGCONT)
	c.waitReady(n, 30*time.Second)
	r, err := do(context.Background(), http.MethodPost, n.ingressURL()+"/Echo/echo/send", []byte(`"y"`), nil)
	if err != nil || r.status != http.StatusAccepted {
		t.Fatalf("the live node after the refused start: %v %+v", err, r)
	}
}

// dirDigest maps every file and directory under dir to its content's
// hash and mode ("dir" for directories).
func dirDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[path] = "dir " + info.Mode().String()
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[path] = fmt.Sprintf("%x %s", sha256.Sum256(b), info.Mode())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
