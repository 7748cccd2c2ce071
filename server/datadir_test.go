package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftgate/raftgate/raftlog"
)

func openTestNode(t *testing.T, dir string) *raftlog.Node {
	t.Helper()
	cfg := raftlog.DefaultConfig()
	cfg.NodeID = 1
	cfg.DataDir = dir
	cfg.Peers = map[uint64]string{1: "127.0.0.1:1"}
	cfg.Knobs = &raftlog.Knobs{ManualTicks: true}
	n, err := raftlog.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPinPartitionCount: the count is pinned inside state.db, so a copy of
// that file alone (a restore) carries it: started with another count, the
// node is refused.
func TestPinPartitionCount(t *testing.T) {
	dir := t.TempDir()
	n := openTestNode(t, dir)
	if err := pinPartitionCount(dir, n, 4); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if err := pinPartitionCount(dir, n, 4); err != nil {
		t.Fatalf("restart with the same count: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// Restored as documented: only state.db, in an emptied data dir.
	state, err := os.ReadFile(filepath.Join(dir, raftlog.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	restored := t.TempDir()
	if err := os.WriteFile(filepath.Join(restored, raftlog.StateFile), state, 0o600); err != nil {
		t.Fatal(err)
	}
	n = openTestNode(t, restored)
	defer n.Close()
	err = pinPartitionCount(restored, n, 2)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("restored node with another count: %v, want ErrInvalidConfig", err)
	}
	t.Log(err)
}

// TestLegacyPartitionsFileStillChecked: a data dir of the first release
// kept the count in a file of its own.
func TestLegacyPartitionsFileStillChecked(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, legacyPartitionsFile), []byte("4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := openTestNode(t, dir)
	defer n.Close()
	if err := pinPartitionCount(dir, n, 3); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("start with 3 against the legacy file's 4: %v, want ErrInvalidConfig", err)
	}
}
