package raftlog

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	bolt "go.etcd.io/bbolt"
)

// countOf reads recordingSM's entry count from its state bucket.
func countOf(b *bolt.Bucket) uint64 {
	if v := b.Get([]byte("count")); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// TestViewCheckpointRunsBesideTheApplier: a long ViewCheckpoint on one
// group does not hold up another group's applies, and sees what its own
// group applied before the call although no timed checkpoint ran
// (read-your-writes). View, on the applier, would hold them up.
func TestViewCheckpointRunsBesideTheApplier(t *testing.T) {
	c := newCluster(t, testSeed(t), 1, []GroupID{1, 2}, func(cfg *Config) {
		cfg.CheckpointInterval = time.Hour // only the read's own checkpoint
		cfg.CheckpointEntries = 1 << 30
	})
	c.leader(1, c.ids, 5*time.Second)
	c.leader(2, c.ids, 5*time.Second)
	for range 3 {
		if err := c.propose(1, 1, "one"); err != nil {
			t.Fatal(err)
		}
	}
	g1 := c.nodes[1].Group(1)
	entered, release := make(chan uint64), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // a failing test lets the read end
	readDone := make(chan error, 1)
	go func() {
		readDone <- g1.ViewCheckpoint(context.Background(), func(b *bolt.Bucket) error {
			entered <- countOf(b)
			<-release // a long read
			return nil
		})
	}()
	if n := <-entered; n != 3 {
		t.Fatalf("ViewCheckpoint saw %d entries of group 1, want the 3 applied before it", n)
	}
	// Group 2 applies while group 1's read goes on (c.propose waits for
	// the apply, up to 5 s).
	if err := c.propose(1, 2, "two"); err != nil {
		t.Fatalf("group 2's entry while group 1 is read: %v", err)
	}
	once.Do(func() { close(release) })
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}
}

// TestViewAbandonedBeforeItRuns: a View whose context ends while it waits
// for the applier returns the context's error, and its fn never runs.
func TestViewAbandonedBeforeItRuns(t *testing.T) {
	c := newCluster(t, testSeed(t), 1, []GroupID{1}, nil)
	c.leader(1, c.ids, 5*time.Second)
	g := c.nodes[1].Group(1)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // a failing test frees the applier
	blockerDone := make(chan error, 1)
	go func() {
		blockerDone <- g.View(context.Background(), func(*bolt.Bucket) error {
			close(entered)
			<-release // holds the applier
			return nil
		})
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{}, 1)
	abandoned := make(chan error, 1)
	go func() {
		abandoned <- g.View(ctx, func(*bolt.Bucket) error { ran <- struct{}{}; return nil })
	}()
	// Queued behind the blocker: cancel it there.
	testutil.WaitFor(t, 5*time.Second, "the second view queued", func() bool {
		c.nodes[1].ap.mu.Lock()
		defer c.nodes[1].ap.mu.Unlock()
		return len(c.nodes[1].ap.queue) > 0
	})
	cancel()
	select {
	case err := <-abandoned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned View returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("View did not return within 10 s of its context's end")
	}
	once.Do(func() { close(release) })
	if err := <-blockerDone; err != nil {
		t.Fatal(err)
	}
	// A later view has run, so the applier passed the abandoned one.
	if err := g.View(context.Background(), func(*bolt.Bucket) error { return nil }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Fatal("the abandoned View's fn ran")
	default:
	}
}
