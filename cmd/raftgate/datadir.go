package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// partitionsFile records, in a node's data dir, the partition count the
// cluster was bootstrapped with. Every node must route with the same count
// for the cluster's life, so a restart with another --partitions is refused
// instead of misrouting invocations.
const partitionsFile = "partitions"

// pinPartitionCount records p in dir at the first start and checks it on
// every later start.
func pinPartitionCount(dir string, p uint32) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	path := filepath.Join(dir, partitionsFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		pinned, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if perr != nil {
			return fmt.Errorf("--data-dir: %s is corrupt (%q): %w", path, b, perr)
		}
		if uint32(pinned) != p {
			return fmt.Errorf("%w: --partitions: %d, but this node's data dir was created with %d; the partition count of a cluster cannot change",
				ErrInvalidConfig, p, pinned)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.FormatUint(uint64(p), 10)+"\n"), 0o600); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		f, err := os.Open(tmp)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		return os.Rename(tmp, path)
	default:
		return fmt.Errorf("--data-dir: %w", err)
	}
}
