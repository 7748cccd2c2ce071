package test

import (
	"context"
	"encoding/json"
	"github.com/raftgate/raftgate/internal/testutil"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestNodeVersion checks what a running node says about its build: GET
// /version, the raftgate_build_info gauge, the start-up log line and the
// VERSION column of raftgate status, all the same as `raftgate version`.
func TestNodeVersion(t *testing.T) {
	out, err := exec.Command(binary, "version").Output()
	if err != nil {
		t.Fatalf("raftgate version: %v", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	want := strings.TrimPrefix(first, "raftgate ")
	// The test binary is built from a work tree: docs/operations.md says
	// such a build is "devel" (Go stamps it with a pseudo-version).
	if want != "devel" {
		t.Fatalf("raftgate version of a work-tree build says %q, want devel", first)
	}

	c := startCluster(t, clusterOpts{nodes: 1})
	n := c.nodes[0]
	ctx := context.Background()
	r, err := do(ctx, http.MethodGet, n.adminURL()+"/version", nil, nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("/version: %v %+v", err, r)
	}
	var b struct {
		Version   string `json:"version"`
		GoVersion string `json:"goVersion"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || b.Version != want || !strings.HasPrefix(b.GoVersion, "go") {
		t.Fatalf("/version = %s, want version %q", r.body, want)
	}
	r, err = do(ctx, http.MethodGet, n.adminURL()+"/metrics", nil, nil)
	if err != nil || !strings.Contains(string(r.body), `raftgate_build_info{build_date="`) ||
		!strings.Contains(string(r.body), `version="`+want+`"} 1`) {
		t.Fatalf("/metrics has no raftgate_build_info for %q: %v", want, err)
	}
	logText, _ := os.ReadFile(n.logPath)
	if !strings.Contains(string(logText), `"version":"`+want+`"`) {
		t.Fatalf("the node's log does not name its version:\n%s", tail(n.logPath, 10))
	}
	// Without --ingress-tokens the node warns once its ingress serves.
	testutil.WaitFor(t, 5*time.Second, "the open-ingress warning", func() bool {
		b, _ := os.ReadFile(n.logPath)
		return strings.Contains(string(b), `"level":"warn"`) && strings.Contains(string(b), "without authentication")
	})
	out, err = exec.Command(binary, "status", "--admin", n.adminURL()).Output()
	if err != nil || !strings.Contains(string(out), "VERSION") || !strings.Contains(string(out), want) {
		t.Fatalf("raftgate status: %v\n%s", err, out)
	}
}
