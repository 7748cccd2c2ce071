package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// replicaView is one replica of GET /cluster's partitions.
type replicaView struct {
	NodeID uint64  `json:"nodeId"`
	Match  uint64  `json:"match"`
	Down   bool    `json:"down"`
	Lag    *uint64 `json:"lag"`
}

// leaderReplicas reads GET /cluster?leaders=1 from n: per partition with a
// known leader that could be asked, its replicas.
func leaderReplicas(n *node) (map[uint32][]replicaView, error) {
	r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/cluster?leaders=1", nil, nil)
	if err != nil || r.status != http.StatusOK {
		return nil, fmt.Errorf("/cluster: %v %+v", err, r)
	}
	var v struct {
		Partitions []struct {
			ID       uint32        `json:"id"`
			Leader   uint64        `json:"leader"`
			Replicas []replicaView `json:"replicas"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		return nil, err
	}
	out := map[uint32][]replicaView{}
	for _, p := range v.Partitions {
		if p.Leader != 0 && len(p.Replicas) > 0 {
			out[p.ID] = p.Replicas
		}
	}
	if len(out) != len(v.Partitions) {
		return nil, fmt.Errorf("%d of %d partitions show their replicas", len(out), len(v.Partitions))
	}
	return out, nil
}

// TestDeadReplicaShownDown: with a node killed, every partition's leader
// reports that node's replica down with its lag unknown (null), not
// caught up with lag 0, and `raftgate status` says so too (issue 35,
// item 6); live replicas keep a lag.
func TestDeadReplicaShownDown(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: 2})
	n1, n3 := c.nodes[0], c.nodes[2]
	testutil.WaitFor(t, 10*time.Second, "every replica heard from, with a lag", func() bool {
		ps, err := leaderReplicas(n1)
		if err != nil {
			return false
		}
		for _, rs := range ps {
			for _, r := range rs {
				if r.Down || r.Lag == nil {
					return false
				}
			}
		}
		return true
	})

	c.kill(n3)
	var last map[uint32][]replicaView
	testutil.WaitFor(t, 20*time.Second, "node 3's replicas down with lag unknown, the others up", func() bool {
		ps, err := leaderReplicas(n1)
		if err != nil {
			return false
		}
		last = ps
		for _, rs := range ps {
			for _, r := range rs {
				if (r.NodeID == 3) != (r.Down && r.Lag == nil) {
					return false
				}
			}
		}
		return true
	})
	out, err := exec.Command(binary, "status", "--admin", n1.adminURL()).CombinedOutput()
	text := string(out)
	if err != nil || !strings.Contains(text, "3:down(match ") || regexp.MustCompile(`\b3:\d+/\d+`).MatchString(text) {
		t.Fatalf("raftgate status with node 3 killed (%v), partitions %v:\n%s", err, last, text)
	}
	if !regexp.MustCompile(`(?m)^3\s+(NO|suspect)\s`).MatchString(text) {
		t.Fatalf("raftgate status shows node 3 neither dead nor suspect:\n%s", text)
	}
}

// TestCLIInvokeAndCancel: `raftgate invoke` with a token that may send
// but not attach gets its result without creating anything it cannot
// fetch, and a second `invocations cancel` says the invocation was already
// cancelled (issue 35, item 9).
func TestCLIInvokeAndCancel(t *testing.T) {
	const sendOnly = "send-only-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "tokens.toml")
	if err := os.WriteFile(tokenFile, []byte(`
[[token]]
name = "sender"
token = "`+sendOnly+`"
services = ["*"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, clusterOpts{nodes: 1, extraArgs: func(int) []string { return []string{"--ingress-tokens", tokenFile} }})
	n := c.nodes[0]
	rec := newRecorder(t)
	c.registerService(n, "Echo", rec.srv.URL)
	cli := func(args ...string) (string, string, int) {
		cmd := exec.Command(binary, append(args, "--admin", n.adminURL())...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("raftgate %v: %v", args, err)
		}
		return stdout.String(), stderr.String(), code
	}
	count := func() int {
		r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/invocations", nil, nil)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("/invocations: %v %+v", err, r)
		}
		var l struct{ Invocations []json.RawMessage }
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Fatal(err)
		}
		return len(l.Invocations)
	}

	stdout, stderr, code := cli("invoke", "Echo/hi", `{"n":1}`, "--token", sendOnly, "--ingress", n.ingressURL())
	if code != 0 || strings.TrimSpace(stdout) != `{"n":1}` || !strings.Contains(stderr, "may not attach") {
		t.Fatalf("invoke with a send-only token: exit %d\nstdout %q\nstderr %q", code, stdout, stderr)
	}
	if got := count(); got != 1 {
		t.Fatalf("%d invocations after one invoke, want 1", got)
	}

	r, err := do(context.Background(), http.MethodPost, n.ingressURL()+"/Echo/hi/send?delay=1h", []byte(`{}`),
		map[string]string{"authorization": "Bearer " + sendOnly})
	if err != nil || r.status != http.StatusAccepted {
		t.Fatalf("send: %v %+v", err, r)
	}
	id := r.header.Get("x-restate-id")
	if stdout, stderr, code = cli("invocations", "cancel", id); code != 0 || stdout != "cancelled "+id+"\n" {
		t.Fatalf("first cancel: exit %d %q %q", code, stdout, stderr)
	}
	if stdout, stderr, code = cli("invocations", "cancel", id); code != 0 || stdout != id+" was already cancelled\n" {
		t.Fatalf("second cancel: exit %d %q %q", code, stdout, stderr)
	}
}
