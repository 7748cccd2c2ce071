package server

import (
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestServerPortInUseLeavesDataDirAlone: a node whose ingress, admin, node
// or gossip port is taken fails naming the flag and the address, before it
// creates or initialises its data dir.
func TestServerPortInUseLeavesDataDirAlone(t *testing.T) {
	for _, flag := range []string{"--ingress-addr", "--admin-addr", "--node-addr", "--gossip-addr"} {
		t.Run(flag, func(t *testing.T) {
			held, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { held.Close() })
			addrs := map[string]string{
				"--ingress-addr": freeAddr(t), "--admin-addr": freeAddr(t),
				"--node-addr": freeAddr(t), "--gossip-addr": freeAddr(t),
			}
			addrs[flag] = held.Addr().String()
			dataDir := filepath.Join(t.TempDir(), "data")
			cfg := DefaultConfig()
			cfg.DataDir = dataDir
			cfg.IngressAddr, cfg.AdminAddr = addrs["--ingress-addr"], addrs["--admin-addr"]
			cfg.NodeAddr, cfg.GossipAddr = addrs["--node-addr"], addrs["--gossip-addr"]
			cfg.InitialCluster = map[uint64]string{1: cfg.NodeAddr}

			n, err := New(cfg)
			if err == nil {
				n.Close()
			}
			if err == nil || !strings.HasPrefix(err.Error(), flag+": ") || !strings.Contains(err.Error(), held.Addr().String()) ||
				!strings.Contains(err.Error(), "address already in use") {
				t.Errorf("New: %v; want an error naming %s, %s and the address in use", err, flag, held.Addr())
			}
			if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
				entries, _ := os.ReadDir(dataDir)
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("data dir touched although a port was in use (stat: %v; holds %v)", err, names)
			}
		})
	}
}

// TestShutdownKeepsAnsweringWhileDraining: once a node starts shutting
// down, its ingress keeps accepting connections for the drain delay,
// answering health and new requests with a retry-safe 503 (so that a load
// balancer notices), then closes; shutdown ends within the grace.
func TestShutdownKeepsAnsweringWhileDraining(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	nd := startTestCluster(t, 1)[0]
	// Read only by shutdown, which starts below: a 2s drain window leaves
	// room for a slow machine.
	nd.cfg.ShutdownGrace = 4 * time.Second
	nd.cfg.DrainDelay = 2 * time.Second
	grace, drain := nd.cfg.ShutdownGrace, nd.cfg.DrainDelay
	// Every request on a new connection, as a load balancer's probe.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	// try answers the status and the Retry-After header, or why it got none.
	try := func(method, path string) (int, string, error) {
		req, err := http.NewRequest(method, "http://"+nd.cfg.IngressAddr+path, strings.NewReader(`"x"`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After"), nil
	}
	if status, _, err := try(http.MethodGet, "/restate/health"); status != http.StatusOK {
		t.Fatalf("health before shutdown = %d, %v", status, err)
	}

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- nd.Close() }()

	var (
		status     int
		retryAfter string
		err        error
	)
	testutil.WaitFor(t, grace, "health to stop answering 200", func() bool {
		status, retryAfter, err = try(http.MethodGet, "/restate/health")
		return err != nil || status != http.StatusOK
	})
	if err != nil || status != http.StatusServiceUnavailable || retryAfter == "" {
		t.Fatalf("health while draining = %d (Retry-After %q, error %v), want 503 with Retry-After", status, retryAfter, err)
	}
	if status, retryAfter, err = try(http.MethodPost, "/Greeter/greet"); err != nil || status != http.StatusServiceUnavailable || retryAfter == "" {
		t.Fatalf("new request while draining = %d (Retry-After %q, error %v), want 503 with Retry-After", status, retryAfter, err)
	}

	testutil.WaitFor(t, grace+time.Second, "the ingress listener to close", func() bool {
		_, _, err := try(http.MethodGet, "/restate/health")
		return err != nil
	})
	if open := time.Since(start); open < drain {
		t.Errorf("ingress stopped accepting %v after shutdown began, want at least the drain delay (%v)", open, drain)
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if took := time.Since(start); took > grace+time.Second {
		t.Errorf("shutdown took %v, grace %v", took, grace)
	}
}

// TestCloseWithoutStart: a node that was only created lets its listeners
// go on Close, and leaves its data dir alone.
func TestCloseWithoutStart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.IngressAddr, cfg.AdminAddr, cfg.NodeAddr, cfg.GossipAddr = freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.InitialCluster = map[uint64]string{1: cfg.NodeAddr}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, addr := range []string{cfg.AdminAddr, cfg.NodeAddr, cfg.GossipAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s still held after Close: %v", addr, err)
		}
		ln.Close()
	}
	if _, err := os.Stat(cfg.DataDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("data dir touched by New and Close: %v", err)
	}
}
