package test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/test/freeport"
)

// binary is the raftgate executable built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "raftgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// RAFTGATE_E2E_BINARY runs the suite against a binary built elsewhere
	// (a release, or another revision) instead of building this tree.
	binary = os.Getenv("RAFTGATE_E2E_BINARY")
	if binary == "" {
		binary = filepath.Join(dir, "raftgate")
		build := exec.Command("go", "build", "-o", binary, "../cmd/raftgate")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building raftgate:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a port for a node of this package's clusters (see
// freeport: in the ephemeral range another process could take it before
// the node binds it).
func freePort(t testing.TB) int {
	t.Helper()
	return freeport.Port(t, freeport.E2E)
}

// node is one raftgate server process.
type node struct {
	id                               int
	dataDir, logPath                 string
	ingressAddr, adminAddr, nodeAddr string
	gossipAddr                       string
	extraArgs                        []string
	cmd                              *exec.Cmd
	exited                           chan struct{}
	// env is added to the process's environment at its next start.
	env []string
}

func (n *node) ingressURL() string { return "http://" + n.ingressAddr }
func (n *node) adminURL() string   { return "http://" + n.adminAddr }

// cluster is a set of server processes started by one test.
type cluster struct {
	t        testing.TB
	nodes    []*node
	initial  string
	adminTok string
	// net is the fault-injecting proxy mesh between the nodes, when the
	// cluster was started with clusterOpts.proxied.
	net *faultNet
	mu  sync.Mutex
}

// testPartitions is a process test's partition count when it sets none.
const testPartitions = 2

type clusterOpts struct {
	nodes      int
	partitions int
	extraArgs  func(id int) []string
	// proxied routes node-to-node gRPC through a faultNet: each node's
	// --initial-cluster names a proxy per peer, --node-addr stays real.
	proxied bool
	// dataDir, when set, names each node's data dir (default: under
	// t.TempDir()).
	dataDir func(id int) string
	// env, when set, is added to each node's environment at its first
	// start only.
	env func(id int) []string
}

// startCluster starts opts.nodes servers on free ports and waits until each
// is ready (a leader known for every partition).
func startCluster(t testing.TB, opts clusterOpts) *cluster {
	t.Helper()
	if opts.nodes == 0 {
		opts.nodes = 3
	}
	c := &cluster{t: t}
	base := t.TempDir()
	var initial, gossip []string
	for i := 1; i <= opts.nodes; i++ {
		n := &node{
			id:          i,
			dataDir:     filepath.Join(base, fmt.Sprintf("node%d", i)),
			logPath:     filepath.Join(base, fmt.Sprintf("node%d.log", i)),
			ingressAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			adminAddr:   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			nodeAddr:    fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			gossipAddr:  fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		}
		if opts.extraArgs != nil {
			n.extraArgs = opts.extraArgs(i)
		}
		if opts.dataDir != nil {
			n.dataDir = opts.dataDir(i)
		}
		if opts.env != nil {
			n.env = opts.env(i)
		}
		initial = append(initial, fmt.Sprintf("%d=%s", i, n.nodeAddr))
		gossip = append(gossip, n.gossipAddr)
		c.nodes = append(c.nodes, n)
	}
	c.initial = strings.Join(initial, ",")
	var ids []int
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	realAddr := func(id int) string { return c.nodes[id-1].nodeAddr }
	if opts.proxied {
		c.net = newFaultNet(t, ids, realAddr)
	}
	for _, n := range c.nodes {
		initialCluster := c.initial
		if c.net != nil {
			initialCluster = c.net.initialCluster(ids)
		}
		args := []string{
			"server",
			"--node-id", fmt.Sprint(n.id),
			"--data-dir", n.dataDir,
			"--ingress-addr", n.ingressAddr,
			"--admin-addr", n.adminAddr,
			"--node-addr", n.nodeAddr,
			"--gossip-addr", n.gossipAddr,
			"--initial-cluster", initialCluster,
			"--join", strings.Join(gossip, ","),
			"--shutdown-grace", "5s",
		}
		// Two partitions unless the test says: fewer groups to elect and
		// tick than the server's default keeps the suite fast (dev_test.go
		// runs the default).
		args = append(args, "--partitions", fmt.Sprint(cmp.Or(opts.partitions, testPartitions)))
		n.extraArgs = append(args, n.extraArgs...)
	}
	t.Cleanup(c.stopAll)
	for _, n := range c.nodes {
		c.start(n)
		n.env = nil
	}
	for _, n := range c.nodes {
		c.waitReady(n, 30*time.Second)
	}
	return c
}

func (c *cluster) start(n *node) {
	c.t.Helper()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatalf("log file: %v", err)
	}
	cmd := exec.Command(binary, n.extraArgs...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(n.env) > 0 {
		cmd.Env = append(os.Environ(), n.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("start node %d: %v", n.id, err)
	}
	n.cmd = cmd
	if c.net != nil {
		c.net.setPID(n.id, cmd.Process.Pid)
	}
	n.exited = make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(exited)
	}(n.exited)
}

// waitReady waits for the node's /readyz.
func (c *cluster) waitReady(n *node, timeout time.Duration) {
	c.t.Helper()
	var last string
	defer func() {
		if c.t.Failed() {
			c.t.Logf("node %d's last /readyz answer: %s", n.id, last)
		}
	}()
	testutil.WaitFor(c.t, timeout, fmt.Sprintf("node %d ready", n.id), func() bool {
		select {
		case <-n.exited:
			c.t.Fatalf("node %d exited while starting:\n%s", n.id, tail(n.logPath, 40))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := do(ctx, http.MethodGet, n.adminURL()+"/readyz", nil, nil)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%d %s", r.status, r.body)
		return r.status == http.StatusOK
	})
}

// signal sends sig to node n's process group.
func (c *cluster) signal(n *node, sig syscall.Signal) {
	if n.cmd != nil && n.cmd.Process != nil {
		syscall.Kill(-n.cmd.Process.Pid, sig)
	}
}

// kill stops node n with SIGKILL and waits for it to exit.
func (c *cluster) kill(n *node) {
	c.signal(n, syscall.SIGKILL)
	<-n.exited
}

// terminate stops node n with SIGTERM and waits up to grace+5s.
func (c *cluster) terminate(n *node, within time.Duration) {
	c.t.Helper()
	c.signal(n, syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(within):
		c.kill(n)
		c.t.Fatalf("node %d did not stop within %v after SIGTERM:\n%s", n.id, within, tail(n.logPath, 40))
	}
}

// restart starts node n again from its data dir and waits until ready.
func (c *cluster) restart(n *node) {
	c.t.Helper()
	c.start(n)
	c.waitReady(n, 30*time.Second)
}

func (c *cluster) stopAll() {
	failed := c.t.Failed()
	for _, n := range c.nodes {
		if n.cmd == nil {
			continue
		}
		select {
		case <-n.exited:
			continue
		default:
		}
		c.signal(n, syscall.SIGCONT)
		if failed {
			if r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/cluster", nil, nil); err == nil {
				c.t.Logf("node %d /cluster: %s", n.id, r.body)
			}
			// A goroutine dump in the node's log shows where it was stuck.
			c.signal(n, syscall.SIGQUIT)
			select {
			case <-n.exited:
			case <-time.After(5 * time.Second):
			}
		}
		c.signal(n, syscall.SIGKILL)
		<-n.exited
	}
	if !failed {
		return
	}
	keep := os.Getenv("RAFTGATE_E2E_LOGDIR")
	for _, n := range c.nodes {
		c.t.Logf("---- node %d log tail ----\n%s", n.id, tail(n.logPath, 30))
		if keep != "" {
			if b, err := os.ReadFile(n.logPath); err == nil {
				dst := filepath.Join(keep, fmt.Sprintf("%s-node%d.log", strings.ReplaceAll(c.t.Name(), "/", "_"), n.id))
				if err := os.WriteFile(dst, b, 0o644); err == nil {
					c.t.Logf("node %d full log kept at %s", n.id, dst)
				}
			}
		}
	}
}

// tail returns the last lines of a file.
func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	parts := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// httpClient is shared by the tests; generous timeouts, the tests bound
// their own waits.
var httpClient = &http.Client{
	Timeout:   60 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 256},
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request through httpClient; a body is JSON unless header
// says otherwise.
func do(ctx context.Context, method, url string, body []byte, header map[string]string) (*response, error) {
	var pairs []string
	if body != nil {
		pairs = append(pairs, "content-type", "application/json")
	}
	for k, v := range header {
		pairs = append(pairs, k, v)
	}
	r, err := testutil.Request(ctx, httpClient, method, url, body, pairs...)
	if err != nil {
		return nil, err
	}
	return &response{status: r.Status, header: r.Header, body: r.Body}, nil
}

// registerService registers name at url through node n's admin API and
// waits until every node's ingress knows it.
func (c *cluster) registerService(n *node, name, url string) {
	c.t.Helper()
	body, _ := json.Marshal(map[string]any{"url": url})
	testutil.WaitFor(c.t, 20*time.Second, "service registration", func() bool {
		r, err := do(context.Background(), http.MethodPut, n.adminURL()+"/services/"+name, body, nil)
		return err == nil && r.status/100 == 2
	})
	for _, m := range c.nodes {
		testutil.WaitFor(c.t, 10*time.Second, fmt.Sprintf("node %d sees service %s", m.id, name), func() bool {
			r, err := do(context.Background(), http.MethodGet, m.adminURL()+"/services/"+name, nil, nil)
			return err == nil && r.status == http.StatusOK
		})
	}
}
