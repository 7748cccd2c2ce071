package raftlog

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestStagedSnapshotInstall: a follower behind a compacted log gets a
// snapshot that the applier loads in many small steps (other groups apply
// between them) before swapping it in; the follower ends with the
// leader's state, no staging bucket, and a staging bucket left by a crash
// is dropped when the node opens again.
func TestStagedSnapshotInstall(t *testing.T) {
	var steps atomic.Int64
	c := newCluster(t, testSeed(t), 3, []GroupID{1}, func(cfg *Config) {
		cfg.SnapshotEntries = 40
		cfg.SnapshotCatchUpEntries = 5
		cfg.Knobs = &Knobs{InstallStepBytes: 64, AfterInstallStep: func(GroupID) { steps.Add(1) }}
	})
	down := c.behindCompaction(t, func(i int) string { return fmt.Sprintf("entry-%03d", i) })
	c.start(down)
	got := c.converged(1, 200, 10*time.Second)
	if got[0] != "entry-000" || got[len(got)-1] != "entry-199" {
		t.Fatalf("after catch-up: first %q last %q", got[0], got[len(got)-1])
	}
	if testCounter(c.nodes[down].metrics.snapshotsInstalled) == 0 {
		t.Fatalf("follower %d caught up without a snapshot", down)
	}
	// 200 entries of 9 bytes (and their keys) in steps of 64 bytes.
	if n := steps.Load(); n < 10 {
		t.Fatalf("the snapshot loaded in %d steps, want many (64-byte steps)", n)
	}
	c.sameDigests(1, 5*time.Second)
	hasStaging := func() bool {
		var found bool
		if err := c.nodes[down].db.View(func(tx *bolt.Tx) error {
			found = tx.Bucket(groupBucketName(1)).Bucket(bucketStaging) != nil
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return found
	}
	if hasStaging() {
		t.Fatal("a staging bucket is left after the install")
	}

	// A crash in the middle of a load leaves a staged state behind.
	c.stop(down)
	db, err := bolt.Open(filepath.Join(c.dirs[down], stateFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		stage, err := tx.Bucket(groupBucketName(1)).CreateBucket(bucketStaging)
		if err != nil {
			return err
		}
		st, err := stage.CreateBucket(bucketState)
		if err != nil {
			return err
		}
		return st.Put([]byte("half"), []byte("loaded"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	c.start(down)
	if hasStaging() {
		t.Fatal("the staging bucket a crash left survived the node's open")
	}
	c.sameDigests(1, 5*time.Second)
}
