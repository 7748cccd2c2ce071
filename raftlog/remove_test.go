package raftlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/internal/testutil"
)

// removedFromDisk fails t unless node n keeps nothing of group id: no
// state buckets, no tombstone, no records in the write-ahead log.
func removedFromDisk(t *testing.T, n *Node, id GroupID) {
	t.Helper()
	if slices.Contains(n.wal.Groups(), uint32(id)) {
		t.Errorf("the write-ahead log still holds group %d", id)
	}
	err := n.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(groupBucketName(id)) != nil {
			t.Errorf("state.db still holds group %d's buckets", id)
		}
		if ts := tombstones(tx); ts != nil && ts.Get(tombstoneKey(id)) != nil {
			t.Errorf("group %d's tombstone is still there", id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRemoveGroupDeletesTheReplica: removing a group from one node of
// three deletes its state and log there, leaves the other groups and the
// other replicas working, and survives a restart. Adding it back under the
// same configuration is caught as a stale log.
func TestRemoveGroupDeletesTheReplica(t *testing.T) {
	c := newCluster(t, testSeed(t), 3, []GroupID{1, 2}, nil)
	for i := range 20 {
		if err := c.proposeAnywhere(2, fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.converged(2, 20, 10*time.Second)
	n3 := c.nodes[3]
	g := n3.Group(2)
	if err := n3.RemoveGroup(2); err != nil {
		t.Fatal(err)
	}
	if n3.Group(2) != nil {
		t.Fatal("group 2 still listed on node 3 after RemoveGroup")
	}
	if err := n3.RemoveGroup(2); !errors.Is(err, ErrNoGroup) {
		t.Fatalf("second RemoveGroup = %v, want ErrNoGroup", err)
	}
	if err := g.View(context.Background(), func(*bolt.Bucket) error { return nil }); !errors.Is(err, ErrStopped) {
		t.Fatalf("View on the removed group = %v, want ErrStopped", err)
	}
	if ev := g.leaderEvent(); ev.IsSelf || ev.Leader != 0 {
		t.Fatalf("removed group's last leader event = %+v, want led by nobody here", ev)
	}
	removedFromDisk(t, n3, 2)

	// Nodes 1 and 2 still form a quorum of group 2; group 1 still has all
	// three.
	for i := range 5 {
		if err := c.propose(c.leader(2, []uint64{1, 2}, 10*time.Second), 2, fmt.Sprintf("after-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.proposeAnywhere(1, "group 1 goes on"); err != nil {
		t.Fatal(err)
	}

	// A restart does not bring the group back.
	c.groups = []GroupID{1}
	c.stop(3)
	c.start(3)
	removedFromDisk(t, c.nodes[3], 2)
	c.leader(1, c.ids, 10*time.Second)

	// Added back under the same configuration, the empty replica is what
	// the leader's memory of the old one's acknowledgements says it is: a
	// stale log. It stops rather than vote or acknowledge from it.
	if _, err := c.nodes[3].AddGroup(2, c.ids, &recordingSM{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.nodes[3].Failed():
		if !errors.Is(err, ErrStaleLog) {
			t.Fatalf("re-added replica failed with %v, want ErrStaleLog", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a replica re-added under the same configuration did not stop with ErrStaleLog")
	}
	c.stop(3)
}

// TestRemoveGroupIsFinishedAfterACrash: a RemoveGroup cut short after
// either durable step (state deleted; log dropped) is finished when the
// node opens again, and the group's old entries never come back.
func TestRemoveGroupIsFinishedAfterACrash(t *testing.T) {
	crash := errors.New("crash")
	for _, step := range []string{"after the state", "after the log"} {
		t.Run(step, func(t *testing.T) {
			knobs := &Knobs{}
			switch step {
			case "after the state":
				knobs.AfterRemoveState = func() error { return crash }
			default:
				knobs.AfterRemoveLog = func() error { return crash }
			}
			c := newCluster(t, testSeed(t), 1, []GroupID{1, 2}, func(cfg *Config) { cfg.Knobs = knobs })
			c.leader(2, c.ids, 5*time.Second)
			for i := range 10 {
				if err := c.propose(1, 2, fmt.Sprintf("old-%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.nodes[1].RemoveGroup(2); !errors.Is(err, crash) {
				t.Fatalf("RemoveGroup = %v, want the knob's crash", err)
			}
			knobs.AfterRemoveState, knobs.AfterRemoveLog = nil, nil
			c.groups = []GroupID{1}
			c.stop(1)
			c.start(1)
			removedFromDisk(t, c.nodes[1], 2)

			sm := &recordingSM{}
			g, err := c.nodes[1].AddGroup(2, c.ids, sm)
			if err != nil {
				t.Fatal(err)
			}
			c.sms[1][2] = sm
			c.groups = []GroupID{1, 2}
			c.leader(2, c.ids, 5*time.Second)
			if err := c.propose(1, 2, "new"); err != nil {
				t.Fatal(err)
			}
			if got := entriesOf(t, g); !slices.Equal(got, []string{"new"}) {
				t.Fatalf("re-added group holds %q, want only the new entry", got)
			}
		})
	}
}

// TestAddGroupWhileRemovingIsRefused: an id cannot be added again before
// its removal has finished.
func TestAddGroupWhileRemovingIsRefused(t *testing.T) {
	release := make(chan struct{})
	reached := make(chan struct{})
	knobs := &Knobs{AfterRemoveState: func() error { close(reached); <-release; return nil }}
	c := newCluster(t, testSeed(t), 1, []GroupID{1, 2}, func(cfg *Config) { cfg.Knobs = knobs })
	c.leader(2, c.ids, 5*time.Second)
	removed := make(chan error, 1)
	go func() { removed <- c.nodes[1].RemoveGroup(2) }()
	<-reached
	if _, err := c.nodes[1].AddGroup(2, c.ids, &recordingSM{}); !errors.Is(err, ErrGroupExists) {
		t.Errorf("AddGroup during the removal = %v, want ErrGroupExists", err)
	}
	close(release)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "group 2 gone", func() bool { return c.nodes[1].Group(2) == nil })
	c.groups = []GroupID{1}
	removedFromDisk(t, c.nodes[1], 2)
}
