package cluster

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// IdentityFile is the name of a node's identity in its data dir. It is a
// file of its own, not in state.db: a backup of state.db restored on
// another node must not carry an identity with it.
const IdentityFile = "identity.json"

// Identity says which cluster a data dir belongs to and which node it is.
type Identity struct {
	// ClusterID is the cluster's id, hex; empty while a join is pending.
	ClusterID string `json:"clusterId,omitempty"`
	// NodeID is the id the cluster gave this node; 0 while a join is
	// pending.
	NodeID uint64 `json:"nodeId,omitempty"`
	// JoinNonce, hex, is chosen before the first join request and kept, so
	// a join retried after a crash gets the same id.
	JoinNonce string `json:"joinNonce,omitempty"`
	// Partitions is the cluster's partition count, as the join answered.
	Partitions uint32 `json:"partitions,omitempty"`
}

// Complete reports whether the identity names a cluster and a node.
func (id Identity) Complete() bool { return id.ClusterID != "" && id.NodeID != 0 }

// ClusterIDBytes decodes ClusterID.
func (id Identity) ClusterIDBytes() ([]byte, error) {
	b, err := hex.DecodeString(id.ClusterID)
	if err != nil || (len(b) != 0 && len(b) != ClusterIDLen) {
		return nil, fmt.Errorf("cluster: identity: bad cluster id %q", id.ClusterID)
	}
	return b, nil
}

// LoadIdentity reads dir's identity; ok is false when it has none.
func LoadIdentity(dir string) (id Identity, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, IdentityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("cluster: identity: %w", err)
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return Identity{}, false, fmt.Errorf("cluster: %s is corrupt: %w", filepath.Join(dir, IdentityFile), err)
	}
	if _, err := id.ClusterIDBytes(); err != nil {
		return Identity{}, false, err
	}
	return id, true, nil
}

// SaveIdentity writes dir's identity durably: a temporary file, fsynced,
// renamed over the old one, and the directory fsynced.
func SaveIdentity(dir string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cluster: identity: %w", err)
	}
	tmp, err := os.CreateTemp(dir, IdentityFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("cluster: identity: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("cluster: identity: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("cluster: identity: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cluster: identity: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, IdentityFile)); err != nil {
		return fmt.Errorf("cluster: identity: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cluster: identity: %w", err)
	}
	defer d.Close()
	return d.Sync()
}
