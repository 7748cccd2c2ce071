// Package servertest starts real raftgate nodes inside a test process, for
// the tests of packages and programs built around raftgate, as
// net/http/httptest does for HTTP servers: real Raft with fsync'd storage,
// gRPC between the nodes, gossip and HTTP, all on 127.0.0.1.
package servertest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/test/freeport"
)

// startTimeout bounds the wait for a node to serve its ingress: a cluster
// elects its leaders and checks its logs within a few seconds, more on a
// loaded machine.
const startTimeout = 20 * time.Second

// Cluster is a running in-process cluster.
type Cluster struct {
	// Nodes and Configs are by node id: Nodes[0] is node 1.
	Nodes   []*server.Server
	Configs []server.Config
	dir     string
}

// NewCluster starts an n-node cluster with the configs of
// server.DefaultConfig, each on ports of share, with data in a temporary
// directory, two partitions and a 2-second shutdown grace; tune (nil: none) changes each
// config before its node starts. It returns once every node serves its
// ingress. Close stops it; tests use StartCluster, which closes it at the
// end of the test. NewCluster is for a TestMain.
func NewCluster(n int, share freeport.Share, tune func(*server.Config)) (_ *Cluster, err error) {
	c := &Cluster{Configs: make([]server.Config, n)}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if c.dir, err = os.MkdirTemp("", "raftgate-servertest-*"); err != nil {
		return nil, err
	}
	initial := map[uint64]string{}
	var gossip []string
	for i := range c.Configs {
		cfg := server.DefaultConfig()
		cfg.NodeID = uint64(i + 1)
		cfg.DataDir = filepath.Join(c.dir, fmt.Sprintf("node-%d", cfg.NodeID))
		addrs := make([]string, 4)
		for j := range addrs {
			port, err := freeport.Pick(share)
			if err != nil {
				return nil, err
			}
			addrs[j] = fmt.Sprintf("127.0.0.1:%d", port)
		}
		cfg.IngressAddr, cfg.AdminAddr, cfg.NodeAddr, cfg.GossipAddr = addrs[0], addrs[1], addrs[2], addrs[3]
		cfg.ShutdownGrace = 2 * time.Second
		cfg.Partitions = 2 // fewer groups than the default: faster tests
		initial[cfg.NodeID] = cfg.NodeAddr
		gossip = append(gossip, cfg.GossipAddr)
		c.Configs[i] = cfg
	}
	for i := range c.Configs {
		c.Configs[i].InitialCluster = initial
		c.Configs[i].Join = gossip
		if tune != nil {
			tune(&c.Configs[i])
		}
		nd, err := start(c.Configs[i])
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, nd)
	}
	for i, nd := range c.Nodes {
		if err := waitServing(c.Configs[i].NodeID, nd); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Close stops every node and removes the data.
func (c *Cluster) Close() error {
	var errs []error
	for i, nd := range c.Nodes {
		if err := nd.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node %d: close: %w", c.Configs[i].NodeID, err))
		}
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// StartCluster is NewCluster for a test: it fails the test when the
// cluster does not start, and closes it when the test ends.
func StartCluster(tb testing.TB, n int, share freeport.Share, tune func(*server.Config)) ([]*server.Server, []server.Config) {
	tb.Helper()
	c, err := NewCluster(n, share, tune)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Log(err)
		}
	})
	return c.Nodes, c.Configs
}

// Start starts a node with cfg, waits until it serves its ingress and
// closes it when the test ends.
func Start(tb testing.TB, cfg server.Config) *server.Server {
	tb.Helper()
	nd, err := start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := nd.Close(); err != nil {
			tb.Logf("node %d: close: %v", cfg.NodeID, err)
		}
	})
	if err := waitServing(cfg.NodeID, nd); err != nil {
		tb.Fatal(err)
	}
	return nd
}

func start(cfg server.Config) (*server.Server, error) {
	nd, err := server.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", cfg.NodeID, err)
	}
	if err := nd.Start(); err != nil {
		return nil, fmt.Errorf("node %d: %w", cfg.NodeID, err)
	}
	return nd, nil
}

// waitServing waits until nd serves its ingress, at most startTimeout.
func waitServing(id uint64, nd *server.Server) error {
	select {
	case <-nd.Serving():
		return nil
	case err := <-nd.Err():
		return fmt.Errorf("node %d stopped: %w", id, err)
	case <-time.After(startTimeout):
		return fmt.Errorf("node %d does not serve its ingress after %v", id, startTimeout)
	}
}
