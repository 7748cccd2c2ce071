package raftlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile in the data dir carries an exclusive flock(2) for as long as a
// Node has the dir open, and the holder's pid (for the refusal message
// only: the lock, not the file's content, decides). The kernel drops the
// lock when the process dies, so a kill -9 leaves nothing to clean up.
const lockFile = "LOCK"

// LockFile is the name of the lock file in a data dir.
const LockFile = lockFile

// DirLock is a data dir's lock, held until Close.
type DirLock struct{ f *os.File }

// Close releases the lock.
func (l *DirLock) Close() error { return l.f.Close() }

// LockDataDir locks dir (creating it) as Open does, for a caller that
// reads or writes files of its own in the data dir before it opens the
// Node; it hands the lock to Open in Config.DataDirLock.
func LockDataDir(dir string) (*DirLock, error) {
	f, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	return &DirLock{f: f}, nil
}

// ErrDataDirLocked reports a data dir already opened by another process
// (or another Node of this one).
var ErrDataDirLocked = errors.New("raftlog: data dir in use")

// lockDataDir creates dir if needed and locks it. It is the first thing
// Open does: recovery rewrites the log's torn tail, removes old segments and
// clears the snapshot spool, which must never happen under a live node.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftlog: create data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("raftlog: lock data dir: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is open in another raftgate process%s; stop that one first, or give this one a data dir of its own",
				ErrDataDirLocked, dir, lockHolder(dir))
		}
		return nil, fmt.Errorf("raftlog: lock data dir: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockHolder names the pid recorded by the lock's holder, if readable.
func lockHolder(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, lockFile))
	if pid := strings.TrimSpace(string(b)); err == nil && pid != "" {
		return " (pid " + pid + ")"
	}
	return ""
}

// tightenModes removes group and other permissions from the data dir, the
// log's dir and its segments, which earlier releases created 0755/0644:
// the log holds request bodies.
func tightenModes(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm()
		if mode&0o077 != 0 {
			return os.Chmod(path, mode&^0o077)
		}
		return nil
	})
}
