package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestRestoreLostNodeFromPeerBackup follows docs/operations.md "Backup and
// restore": a node killed under traffic loses its whole data directory; a
// hot backup of a peer taken after the loss with `raftgate backup` (GET
// /backup on the peer's admin API) becomes its state.db; the node restarts from it, catches up, serves, and
// its replicas end identical to the others'. Nothing acknowledged is lost.
func TestRestoreLostNodeFromPeerBackup(t *testing.T) {
	c := startEchoCluster(t)
	n1, n3 := c.nodes[0], c.nodes[2]

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("restore-%d", i)
			r, err := do(context.Background(), http.MethodPost, n1.ingressURL()+"/Echo/echo/send",
				[]byte(strconv.Quote(key)), map[string]string{"idempotency-key": key})
			if err == nil && r.status == http.StatusAccepted {
				mu.Lock()
				acked = append(acked, key)
				mu.Unlock()
			}
		}
	})
	defer func() { stop(); wg.Wait() }()
	progress := func(n int) {
		t.Helper()
		mu.Lock()
		target := len(acked) + n
		mu.Unlock()
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d more acknowledged sends", n), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= target
		})
	}
	progress(100)

	c.kill(n3)
	if err := os.RemoveAll(n3.dataDir); err != nil { // the lost disk
		t.Fatal(err)
	}
	// The peer's log must reach past whatever node 3 acknowledged: it does
	// once the leaders have replicated to it for a while after the loss.
	progress(100)

	// The operator's way: raftgate backup against a peer's admin API.
	c.restoreFromPeer(n3)
	progress(100)
	stop()
	wg.Wait()

	if _, err := c.waitConverged(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !n3.alive() {
		t.Fatalf("node 3 exited after its restore:\n%s", tail(n3.logPath, 20))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, key := range acked {
		r, err := do(context.Background(), http.MethodGet, n3.ingressURL()+"/restate/invocation/Echo/echo/"+key+"/attach", nil, nil)
		if err != nil || r.status != http.StatusOK || string(r.body) != strconv.Quote(key) {
			t.Fatalf("attach to acknowledged %s through the restored node: %v %+v", key, err, r)
		}
	}
	if b, err := os.ReadFile(n3.logPath); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(b), "forged or corrupt") {
		t.Errorf("the restored node calls its leader's heartbeat forged or corrupt:\n%s", tail(n3.logPath, 60))
	}
	t.Logf("%d acknowledged sends, all answered through the restored node", len(acked))
}

// TestRestoreWholeClusterFromOneBackup follows docs/operations.md's
// disaster recovery: every node lost, every node restored from the same
// hot copy of one node. Everything acknowledged before the copy began is
// answered afterwards through every node, the registry included, and the
// cluster takes new invocations.
func TestRestoreWholeClusterFromOneBackup(t *testing.T) {
	c := startEchoCluster(t)
	var acked []string
	for i := range 60 {
		key := fmt.Sprintf("dr-%d", i)
		n := c.nodes[i%3]
		r, err := do(context.Background(), http.MethodPost, n.ingressURL()+"/Echo/echo/send",
			[]byte(strconv.Quote(key)), map[string]string{"idempotency-key": key})
		if err != nil || r.status != http.StatusAccepted {
			t.Fatalf("send %s: %v %+v", key, err, r)
		}
		acked = append(acked, key)
	}

	backup := filepath.Join(t.TempDir(), "state.db")
	if out, err := exec.Command(binary, "backup", "--admin", c.nodes[1].adminURL(), "-o", backup).CombinedOutput(); err != nil {
		t.Fatalf("raftgate backup: %v\n%s", err, out)
	}
	copyBytes, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes { // every disk lost
		c.kill(n)
		if err := os.RemoveAll(n.dataDir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(n.dataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.dataDir, "state.db"), copyBytes, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	for _, n := range c.nodes {
		c.waitReady(n, 30*time.Second)
	}
	for i, key := range acked {
		n := c.nodes[i%3]
		r, err := do(context.Background(), http.MethodGet, n.ingressURL()+"/restate/invocation/Echo/echo/"+key+"/attach", nil, nil)
		if err != nil || r.status != http.StatusOK || string(r.body) != strconv.Quote(key) {
			t.Fatalf("attach to %s (acknowledged before the copy) through node %d: %v %+v", key, n.id, err, r)
		}
	}
	for _, n := range c.nodes {
		r, err := do(context.Background(), http.MethodPost, n.ingressURL()+"/Echo/echo", []byte(`"after"`), nil)
		if err != nil || r.status != http.StatusOK || string(r.body) != `"after"` {
			t.Fatalf("call through node %d after the restore: %v %+v", n.id, err, r)
		}
	}
	if _, err := c.waitConverged(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d invocations acknowledged before the copy, all answered after restoring three nodes from it", len(acked))
}

// startEchoCluster starts three nodes with a recording Echo service
// registered (a process-level test: skipped with -short).
func startEchoCluster(t *testing.T) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions})
	rec := newRecorder(t)
	c.registerService(c.nodes[0], "Echo", rec.srv.URL)
	return c
}

// TestRestoreFromTooOldPeerBackupSaysSo: a node restored from a peer's copy
// taken before the node acknowledged more (a copy taken too soon, or kept
// from earlier) starts with a log that ends before what its leaders know it
// has. Their heartbeats commit past its log before it knows who leads: that
// is not a forged or corrupt message, and it must not say so. Then either
// a leader replaces the node's log with a snapshot (it compacted past what
// the node had) and the node serves, or the leaders refuse it and it exits
// with the line that says what is wrong and what to do.
func TestRestoreFromTooOldPeerBackupSaysSo(t *testing.T) {
	c := startEchoCluster(t)
	n2, n3 := c.nodes[1], c.nodes[2]
	old := filepath.Join(t.TempDir(), "state.db")
	if out, err := exec.Command(binary, "backup", "--admin", n2.adminURL(), "-o", old).CombinedOutput(); err != nil {
		t.Fatalf("raftgate backup: %v\n%s", err, out)
	}
	// Node 3 acknowledges entries past the copy in every partition.
	for i := range 60 {
		key := fmt.Sprintf("after-copy-%d", i)
		r, err := do(context.Background(), http.MethodPost, c.nodes[i%3].ingressURL()+"/Echo/echo/send",
			[]byte(strconv.Quote(key)), map[string]string{"idempotency-key": key})
		if err != nil || r.status != http.StatusAccepted {
			t.Fatalf("send %s: %v %+v", key, err, r)
		}
	}
	if _, err := c.waitConverged(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.kill(n3)
	copyBytes, err := os.ReadFile(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(n3.dataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n3.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n3.dataDir, "state.db"), copyBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(n3.logPath, 0); err != nil {
		t.Fatal(err)
	}
	c.start(n3)
	exited := false
	testutil.WaitFor(t, 60*time.Second, "node 3 to serve or to exit", func() bool {
		if !n3.alive() {
			exited = true
			return true
		}
		r, err := do(context.Background(), http.MethodGet, n3.adminURL()+"/readyz", nil, nil)
		return err == nil && r.status == http.StatusOK
	})
	b, err := os.ReadFile(n3.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if strings.Contains(log, "forged or corrupt") {
		t.Errorf("the restored node calls its leader's heartbeats forged or corrupt:\n%s", tail(n3.logPath, 40))
	}
	if !exited {
		t.Logf("node 3 caught up (its leaders sent snapshots)")
		return
	}
	// raftlog's error line for the stopped group comes first, then the
	// node's, which says what to do.
	var first, stopping string
	for line := range strings.SplitSeq(log, "\n") {
		if first == "" && (strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`)) {
			first = line
		}
		if strings.Contains(line, `"message":"stopping: `) {
			stopping = line
		}
	}
	if !strings.Contains(first, "log is older than") {
		t.Errorf("the restored node's first warning or error does not say its log is older than the cluster's:\n%s\nlog:\n%s", first, tail(n3.logPath, 40))
	}
	for _, want := range []string{"this node's log is older than what the cluster has from it", "a new copy of a peer", "raftgate backup --admin"} {
		if !strings.Contains(stopping, want) {
			t.Errorf("the restored node's stopping line does not say %q:\n%s", want, stopping)
		}
	}
	t.Logf("node 3 exited: %s", stopping)
}
