package raftlog

import (
	"net"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
)

// grpcCluster is nodes in one process talking real gRPC over 127.0.0.1,
// each with its own bbolt file (fsync on).
type grpcCluster struct {
	tb      testing.TB
	ids     []uint64
	groups  []GroupID
	peers   map[uint64]string
	dirs    map[uint64]string
	tune    func(*Config)
	newSM   func(uint64, GroupID) StateMachine
	nodes   map[uint64]*Node
	servers map[uint64]*grpc.Server
	sms     map[uint64]map[GroupID]*recordingSM
	// replicas: a node listed here joins its groups (JoinGroup) with this
	// replica id instead of bootstrapping them.
	replicas map[uint64]uint64
}

func newGRPCCluster(tb testing.TB, size int, groups []GroupID, tune func(*Config)) *grpcCluster {
	return newGRPCClusterWith(tb, size, groups, tune, nil)
}

// newGRPCClusterWith builds state machines with newSM (recordingSM when nil).
func newGRPCClusterWith(tb testing.TB, size int, groups []GroupID, tune func(*Config), newSM func(uint64, GroupID) StateMachine) *grpcCluster {
	tb.Helper()
	c := &grpcCluster{tb: tb, groups: groups, tune: tune, newSM: newSM,
		peers: map[uint64]string{}, dirs: map[uint64]string{},
		nodes: map[uint64]*Node{}, servers: map[uint64]*grpc.Server{}, sms: map[uint64]map[GroupID]*recordingSM{},
		replicas: map[uint64]uint64{}}
	lis := map[uint64]net.Listener{}
	for i := 1; i <= size; i++ {
		id := uint64(i)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		c.ids = append(c.ids, id)
		lis[id], c.peers[id], c.dirs[id] = l, l.Addr().String(), tb.TempDir()
	}
	for _, id := range c.ids {
		c.start(id, lis[id])
	}
	tb.Cleanup(func() {
		for _, id := range c.ids {
			c.stop(id)
		}
	})
	return c
}

// start opens node id serving on l (or on its old address when l is nil).
func (c *grpcCluster) start(id uint64, l net.Listener) {
	tb := c.tb
	tb.Helper()
	if l == nil {
		var err error
		testutil.WaitFor(tb, 5*time.Second, "the node's old port to be free", func() bool {
			l, err = net.Listen("tcp", c.peers[id])
			return err == nil
		})
	}
	cfg := Config{
		NodeID:  id,
		DataDir: c.dirs[id],
		Peers:   c.peers,
		Logger:  zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel),
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	n, err := Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	s := grpc.NewServer()
	n.RegisterGRPC(s)
	go func() { _ = s.Serve(l) }()
	c.nodes[id], c.servers[id] = n, s
	c.sms[id] = map[GroupID]*recordingSM{}
	for _, gid := range c.groups {
		var sm StateMachine
		if c.newSM != nil {
			sm = c.newSM(id, gid)
		} else {
			rsm := &recordingSM{}
			c.sms[id][gid] = rsm
			sm = rsm
		}
		var err error
		if r := c.replicas[id]; r != 0 {
			_, err = n.JoinGroup(gid, r, sm)
		} else {
			_, err = n.AddGroup(gid, c.ids, sm)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

func (c *grpcCluster) stop(id uint64) {
	if n := c.nodes[id]; n != nil {
		c.servers[id].Stop()
		if err := n.Close(); err != nil {
			c.tb.Errorf("close node %d: %v", id, err)
		}
		delete(c.nodes, id)
	}
}

// leader waits until all running nodes agree on one leader of gid.
func (c *grpcCluster) leader(tb testing.TB, gid GroupID, timeout time.Duration) uint64 {
	tb.Helper()
	var lead uint64
	testutil.WaitFor(tb, timeout, "a leader agreed by all nodes", func() bool {
		lead = 0
		for _, n := range c.nodes {
			ev := n.Group(gid).leaderEvent()
			if ev.Leader == 0 || (lead != 0 && ev.Leader != lead) {
				return false
			}
			lead = ev.Leader
		}
		return c.nodes[lead] != nil && c.nodes[lead].Group(gid).leaderEvent().IsSelf
	})
	return lead
}
