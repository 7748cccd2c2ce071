package cluster

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/rpc"
)

func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "s.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// step applies one command to state s in db (committed) and returns the
// state after it, the outcome and the refusal.
func step(t *testing.T, db *bolt.DB, s *State, index uint64, c *rpc.Command) (*State, Result, error) {
	t.Helper()
	var res Result
	var refused error
	next := s
	err := db.Update(func(btx *bolt.Tx) error {
		b, err := btx.CreateBucketIfNotExists(bucketCluster)
		if err != nil {
			return err
		}
		x := &tx{b: b, next: s}
		var failure error
		res, refused, failure = x.apply(index, c)
		next = x.next
		return failure
	})
	if err != nil {
		t.Fatal(err)
	}
	return next, res, refused
}

var (
	active   = rpc.NodeState_NODE_STATE_ACTIVE
	joining  = rpc.NodeState_NODE_STATE_JOINING
	draining = rpc.NodeState_NODE_STATE_DRAINING
	removed  = rpc.NodeState_NODE_STATE_REMOVED
)

func initCmd(id []byte, ids ...uint64) *rpc.Command {
	var nodes []*rpc.ClusterNode
	for _, i := range ids {
		nodes = append(nodes, &rpc.ClusterNode{Id: i, NodeAddr: addr(i)})
	}
	return &rpc.Command{Cmd: &rpc.Command_InitCluster{InitCluster: &rpc.InitCluster{ClusterId: id, Nodes: nodes}}}
}

func addr(i uint64) string { return "127.0.0.1:" + string(rune('0'+i)) + "122" }

func joinCmd(nonce, nodeAddr string, replaces uint64, clusterID []byte) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_JoinNode{JoinNode: &rpc.JoinNode{ClusterId: clusterID,
		Node: &rpc.ClusterNode{NodeAddr: nodeAddr, JoinNonce: []byte(nonce), Replaces: replaces}}}}
}

func setCmd(id uint64, from, to rpc.NodeState) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_SetNodeState{SetNodeState: &rpc.SetNodeState{Id: id, From: from, To: to}}}
}

// TestRules walks the cluster record through its life: init, joins (a
// retried one keeps its id), state changes by compare-and-swap, removal,
// and ids never given out twice, with the refusals on the way.
func TestRules(t *testing.T) {
	db := openDB(t)
	s := &State{}
	cid := bytes.Repeat([]byte{7}, ClusterIDLen)
	other := bytes.Repeat([]byte{8}, ClusterIDLen)

	_, _, err := step(t, db, s, 1, joinCmd("a", "127.0.0.1:9", 0, nil))
	if !errors.Is(err, ErrNoCluster) {
		t.Fatalf("join before init: %v", err)
	}
	if _, _, err := step(t, db, s, 2, initCmd(cid[:3], 1)); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("init with a short id: %v", err)
	}
	if _, _, err := step(t, db, s, 2, initCmd(cid, 1, 1)); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("init with a node twice: %v", err)
	}
	if len(s.Nodes) != 0 || s.ID != nil {
		t.Fatalf("a refused init changed the state: %+v", s)
	}
	s, _, err = step(t, db, s, 3, initCmd(cid, 1, 2, 3))
	if err != nil || !bytes.Equal(s.ID, cid) || len(s.Members()) != 3 || s.NextID != 4 {
		t.Fatalf("init: %v %+v", err, s)
	}
	if _, res, err := step(t, db, s, 4, initCmd(cid, 1)); err != nil || !bytes.Equal(res.ClusterID, cid) {
		t.Fatalf("init again, same id: %v", err)
	}
	if _, _, err := step(t, db, s, 4, initCmd(other, 1)); !errors.Is(err, ErrWrongCluster) {
		t.Fatalf("init again, another id: %v", err)
	}

	if _, _, err := step(t, db, s, 5, joinCmd("a", "127.0.0.1:9", 0, other)); !errors.Is(err, ErrWrongCluster) {
		t.Fatalf("join of another cluster's node: %v", err)
	}
	if _, _, err := step(t, db, s, 5, joinCmd("a", addr(2), 0, nil)); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("join at a member's address: %v", err)
	}
	s, res, err := step(t, db, s, 6, joinCmd("a", "127.0.0.1:9", 0, cid))
	if err != nil || res.Node.Id != 4 || res.Node.State != joining || s.NextID != 5 {
		t.Fatalf("join: %v %+v", err, res.Node)
	}
	s, res, err = step(t, db, s, 7, joinCmd("a", "127.0.0.1:9", 0, cid))
	if err != nil || res.Node.Id != 4 || s.NextID != 5 {
		t.Fatalf("the same join retried: %v %+v, next %d", err, res.Node, s.NextID)
	}
	if _, _, err := step(t, db, s, 8, setCmd(4, active, draining)); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("set from a stale state: %v", err)
	}
	if _, _, err := step(t, db, s, 8, setCmd(4, joining, draining)); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("joining → draining: %v", err)
	}
	s, _, err = step(t, db, s, 9, setCmd(4, joining, active))
	if err != nil {
		t.Fatal(err)
	}
	// Replace node 2 at its own address: allowed (it takes 2's place).
	s, res, err = step(t, db, s, 10, joinCmd("b", addr(2), 2, cid))
	if err != nil || res.Node.Id != 5 || res.Node.Replaces != 2 {
		t.Fatalf("replace: %v %+v", err, res.Node)
	}
	for _, st := range [][2]rpc.NodeState{{active, draining}, {draining, removed}} {
		if s, _, err = step(t, db, s, 11, setCmd(2, st[0], st[1])); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := step(t, db, s, 12, setCmd(2, removed, active)); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("a removed node made active again: %v", err)
	}
	if _, _, err := step(t, db, s, 12, joinCmd("c", "127.0.0.1:7", 2, cid)); !errors.Is(err, ErrRemoved) {
		t.Fatalf("replace a removed node: %v", err)
	}
	s, res, err = step(t, db, s, 13, joinCmd("c", "127.0.0.1:7", 0, cid))
	if err != nil || res.Node.Id != 6 {
		t.Fatalf("ids are never reused: got %v %+v", err, res.Node)
	}
	if got := len(s.Members()); got != 5 { // 1, 3, 4, 5, 6
		t.Fatalf("%d members, want 5", got)
	}

	// What was written reads back as the state applied in memory.
	var loaded *State
	if err := db.View(func(btx *bolt.Tx) (err error) {
		loaded, err = load(btx.Bucket(bucketCluster))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !sameState(loaded, s) {
		t.Fatalf("loaded %+v, applied %+v", loaded, s)
	}
}

func sameState(a, b *State) bool {
	if !bytes.Equal(a.ID, b.ID) || a.NextID != b.NextID || a.Index != b.Index || len(a.Nodes) != len(b.Nodes) {
		return false
	}
	for i := range a.Nodes {
		ab, _ := storeMarshal.Marshal(a.Nodes[i])
		bb, _ := storeMarshal.Marshal(b.Nodes[i])
		if !bytes.Equal(ab, bb) {
			return false
		}
	}
	return true
}
