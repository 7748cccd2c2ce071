package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/raftgate/raftgate/raftlog"
)

// The partition count a cluster was bootstrapped with is fixed for its life:
// every node must route with the same count. It is pinned inside the node's
// state file (raftlog.Node.Pin), so it travels with backups, and a start
// with another --partitions is refused instead of misrouting invocations.
// The first release kept it in a file of its own, legacyPartitionsFile,
// which is still checked where it exists.
const (
	partitionsPin        = "partitions"
	legacyPartitionsFile = "partitions"
)

// pinPartitionCount checks p against the legacy file (if any) and pins it
// in the node's state file.
func pinPartitionCount(dir string, rn *raftlog.Node, p uint32) error {
	if err := checkLegacyPartitionsFile(dir, p); err != nil {
		return err
	}
	err := rn.Pin(partitionsPin, []byte(strconv.FormatUint(uint64(p), 10)))
	if errors.Is(err, raftlog.ErrPinMismatch) {
		return fmt.Errorf("%w: --partitions %d: %w; the partition count of a cluster cannot change", ErrInvalidConfig, p, err)
	}
	return err
}

func checkLegacyPartitionsFile(dir string, p uint32) error {
	path := filepath.Join(dir, legacyPartitionsFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--data-dir: %w", err)
	}
	pinned, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if perr != nil {
		return fmt.Errorf("--data-dir: %s is corrupt (%q): %w", path, b, perr)
	}
	if uint32(pinned) != p {
		return fmt.Errorf("%w: --partitions: %d, but this node's data dir was created with %d; the partition count of a cluster cannot change",
			ErrInvalidConfig, p, pinned)
	}
	return nil
}
