package cluster

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// metaNode is a one-node metadata group over a real raftlog data dir.
type metaNode struct {
	n   *raftlog.Node
	reg *registry.Registry
	cl  *Cluster
}

func openMeta(t *testing.T, dir string) *metaNode {
	t.Helper()
	cfg := raftlog.DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Peers = 1, dir, map[uint64]string{1: "127.0.0.1:1"}
	cfg.TickInterval = 10 * time.Millisecond
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	n, err := raftlog.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &metaNode{n: n, reg: registry.New(cfg.Logger), cl: New(cfg.Logger)}
	n.Watch(func(ev raftlog.LeaderEvent) {
		m.reg.OnLeadership(ev)
		m.cl.OnLeadership(ev)
	})
	g, err := n.AddGroup(raftlog.MetaGroup, []uint64{1}, &Machine{Registry: m.reg, Cluster: m.cl})
	if err != nil {
		t.Fatal(err)
	}
	m.reg.Start(g)
	m.cl.Start(g)
	return m
}

// retry runs fn until it stops answering "not leader" (the group is
// electing itself).
func retry[R any](t *testing.T, fn func() (R, error)) (R, error) {
	t.Helper()
	var r R
	var err error
	testutil.WaitFor(t, 10*time.Second, "the metadata group to take commands", func() bool {
		r, err = fn()
		var nl *rpc.NotLeaderError
		return !errors.As(err, &nl) && !errors.Is(err, rpc.ErrLostLeadership)
	})
	return r, err
}

// TestThroughTheLog: cluster commands and registry commands share the
// metadata group's log; each answers its proposer once applied, and both
// records survive a restart of the node (replayed from the log or
// restored from the checkpoint).
func TestThroughTheLog(t *testing.T) {
	dir := t.TempDir()
	m := openMeta(t, dir)
	ctx := context.Background()
	cid := NewClusterID()
	if _, err := retry(t, func() (Result, error) {
		return m.cl.Init(ctx, cid, []*rpc.ClusterNode{{Id: 1, NodeAddr: "127.0.0.1:5122"}})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.reg.Put(ctx, &rpc.Service{Name: "Greeter", Url: "http://127.0.0.1:9080"}); err != nil {
		t.Fatal(err)
	}
	j, err := m.cl.Join(ctx, &rpc.ClusterNode{NodeAddr: "127.0.0.1:5222", JoinNonce: []byte("n2")}, cid)
	if err != nil || j.Node.Id != 2 {
		t.Fatalf("join: %v %+v", err, j.Node)
	}
	if _, err := m.cl.SetState(ctx, 2, joining, active); err != nil {
		t.Fatal(err)
	}
	if _, err := m.cl.SetState(ctx, 2, joining, active); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("a second CAS from joining: %v", err)
	}
	if n, ok := m.cl.State().Node(2); !ok || n.State != active {
		t.Fatalf("node 2 after SetState: %+v", n)
	}
	if err := m.n.Close(); err != nil {
		t.Fatal(err)
	}

	m = openMeta(t, dir)
	defer m.n.Close()
	if n, ok := m.cl.State().Node(2); !ok || n.State != active || string(m.cl.State().ID) != string(cid) {
		t.Fatalf("after a restart: %+v %x", n, m.cl.State().ID)
	}
	if _, ok := m.reg.Lookup("Greeter"); !ok {
		t.Fatal("the registry lost Greeter over a restart")
	}
	j, err = retry(t, func() (Result, error) {
		return m.cl.Join(ctx, &rpc.ClusterNode{NodeAddr: "127.0.0.1:5222", JoinNonce: []byte("n2")}, cid)
	})
	if err != nil || j.Node.Id != 2 {
		t.Fatalf("the join retried after a restart: %v %+v", err, j.Node)
	}
}

// TestIdentityFile: an identity written is read back; a data dir without
// one says so; a corrupt one is an error, not an empty identity.
func TestIdentityFile(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := LoadIdentity(dir); ok || err != nil {
		t.Fatalf("empty dir: %v %v", ok, err)
	}
	want := Identity{ClusterID: "0102030405060708090a0b0c0d0e0f10", NodeID: 4, JoinNonce: "ab"}
	if err := SaveIdentity(dir, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := LoadIdentity(dir)
	if err != nil || !ok || got != want || !got.Complete() {
		t.Fatalf("read back %+v %v %v", got, ok, err)
	}
	if err := SaveIdentity(dir, Identity{ClusterID: "zz"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadIdentity(dir); err == nil {
		t.Fatal("a bad cluster id read without error")
	}
}

// TestApplyBuildsOnUnrevealedApply: the applier may apply a group's next
// entries before the Reveal of the previous ones (one batch, one
// transaction); the second Apply must see the first's changes, as every
// replica's bucket does, or replicas diverge.
func TestApplyBuildsOnUnrevealedApply(t *testing.T) {
	db := openDB(t)
	reg := registry.New(zerolog.Nop())
	m := &Machine{Registry: reg, Cluster: New(zerolog.Nop())}
	cid := bytes.Repeat([]byte{3}, ClusterIDLen)
	entry := func(index uint64, c *rpc.Command) raftlog.Entry {
		data, err := rpc.EncodeBatch(c)
		if err != nil {
			t.Fatal(err)
		}
		return raftlog.Entry{Index: index, Term: 1, Data: data}
	}
	var reveals []func()
	err := db.Update(func(btx *bolt.Tx) error {
		b, err := btx.CreateBucketIfNotExists([]byte("meta"))
		if err != nil {
			return err
		}
		for i, c := range []*rpc.Command{initCmd(cid, 1), joinCmd("n", "127.0.0.1:9", 0, cid)} {
			applied, err := m.Apply(b, []raftlog.Entry{entry(uint64(i+1), c)})
			if err != nil {
				return err
			}
			reveals = append(reveals, applied.Reveal)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reveals {
		r()
	}
	if n, ok := m.Cluster.State().Node(2); !ok || n.State != joining {
		t.Fatalf("the join applied before the init's Reveal was lost: %+v", m.Cluster.State())
	}
}
