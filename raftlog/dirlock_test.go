package raftlog

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestDataDirLockedWhileOpen: a second Open of a data dir that is open
// fails with ErrDataDirLocked before touching it, and succeeds once the
// first Node closed.
func TestDataDirLockedWhileOpen(t *testing.T) {
	c := newCluster(t, 1, 1, []GroupID{1}, nil)
	if _, err := open(c.config(1), c.nw.transportFor); !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second open of a live data dir: %v, want ErrDataDirLocked", err)
	}
	c.stop(1)
	c.start(1)
}

// TestDataDirModes: what a node creates in its data dir is private to its
// user, and a log written 0644/0755 by an earlier release is tightened.
func TestDataDirModes(t *testing.T) {
	c := newCluster(t, 1, 1, []GroupID{1}, nil)
	dir := c.dirs[1]
	c.stop(1)
	walDir := filepath.Join(dir, walDirName)
	if err := os.Chmod(walDir, 0o755); err != nil {
		t.Fatal(err)
	}
	segs, err := os.ReadDir(walDir)
	if err != nil || len(segs) == 0 {
		t.Fatalf("wal dir: %v, %d files", err, len(segs))
	}
	if err := os.Chmod(filepath.Join(walDir, segs[0].Name()), 0o644); err != nil {
		t.Fatal(err)
	}
	c.start(1)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, want no group or other permissions", path, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
