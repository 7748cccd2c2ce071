package raftlog

import (
	"os"

	"github.com/raftgate/raftgate/raftlog/wal"
)

// noSyncFS is the write-ahead log's file layer in a raftgate_nosync build:
// the operating system's, with every fdatasync skipped (see fsync_off.go).
type noSyncFS struct{ wal.OSFS }

func (fs noSyncFS) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	f, err := fs.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

type noSyncFile struct{ wal.File }

func (noSyncFile) Sync() error { return nil }

// logFS is the file layer the node's log is opened on.
func logFS(k *Knobs) wal.FS {
	if fs := k.walFS(); fs != nil {
		return fs
	}
	if noSync {
		return noSyncFS{}
	}
	return nil
}
