// Package servertest starts real raftgate nodes inside a test process, for
// the tests of packages and programs built around raftgate, as
// net/http/httptest does for HTTP servers: real Raft with fsync'd storage,
// gRPC between the nodes, gossip and HTTP, all on 127.0.0.1. Each node is
// closed when the test ends.
package servertest

import (
	"testing"
	"time"

	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/test/freeport"
)

// startTimeout bounds the wait for a node to serve its ingress: a cluster
// elects its leaders and checks its logs within a few seconds, more on a
// loaded machine.
const startTimeout = 20 * time.Second

// Start starts a node with cfg, waits until it serves its ingress and
// closes it when the test ends.
func Start(tb testing.TB, cfg server.Config) *server.Server {
	tb.Helper()
	nd := start(tb, cfg)
	waitServing(tb, cfg.NodeID, nd)
	return nd
}

// StartCluster starts an n-node cluster with the configs of
// server.DefaultConfig, each on ports of share, in a temporary data dir,
// and with a 2-second shutdown grace; tune (nil: none) changes each
// config before the node starts. It returns the nodes by id (nodes[0] is
// node 1) with their configs, once every node serves its ingress; they
// are closed when the test ends.
func StartCluster(tb testing.TB, n int, share freeport.Share, tune func(*server.Config)) ([]*server.Server, []server.Config) {
	tb.Helper()
	initial := map[uint64]string{}
	cfgs := make([]server.Config, n)
	var gossip []string
	for i := range cfgs {
		c := server.DefaultConfig()
		c.NodeID = uint64(i + 1)
		c.DataDir = tb.TempDir()
		c.IngressAddr, c.AdminAddr = freeport.Addr(tb, share), freeport.Addr(tb, share)
		c.NodeAddr, c.GossipAddr = freeport.Addr(tb, share), freeport.Addr(tb, share)
		c.ShutdownGrace = 2 * time.Second
		initial[c.NodeID] = c.NodeAddr
		gossip = append(gossip, c.GossipAddr)
		cfgs[i] = c
	}
	nodes := make([]*server.Server, n)
	for i := range cfgs {
		cfgs[i].InitialCluster = initial
		cfgs[i].Join = gossip
		if tune != nil {
			tune(&cfgs[i])
		}
		nodes[i] = start(tb, cfgs[i])
	}
	for i, nd := range nodes {
		waitServing(tb, cfgs[i].NodeID, nd)
	}
	return nodes, cfgs
}

// start starts a node and registers its Close with the test.
func start(tb testing.TB, cfg server.Config) *server.Server {
	tb.Helper()
	nd, err := server.New(cfg)
	if err != nil {
		tb.Fatalf("node %d: %v", cfg.NodeID, err)
	}
	if err := nd.Start(); err != nil {
		tb.Fatalf("node %d: %v", cfg.NodeID, err)
	}
	tb.Cleanup(func() {
		if err := nd.Close(); err != nil {
			tb.Logf("node %d: close: %v", cfg.NodeID, err)
		}
	})
	return nd
}

// waitServing waits until nd serves its ingress, or fails the test when
// it stops or does not within startTimeout.
func waitServing(tb testing.TB, id uint64, nd *server.Server) {
	tb.Helper()
	select {
	case <-nd.Serving():
	case err := <-nd.Err():
		tb.Fatalf("node %d stopped: %v", id, err)
	case <-time.After(startTimeout):
		tb.Fatalf("node %d does not serve its ingress after %v", id, startTimeout)
	}
}
