package cluster

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// Machine is the metadata group's state machine: the service registry and
// the cluster record side by side, each under its own sub-bucket of the
// group's state. Every entry is one CommandBatch proposed by one of them;
// Machine hands each to its owner. The two are independent, so applying
// the registry's entries of a batch before the cluster's is deterministic.
type Machine struct {
	Registry raftlog.StateMachine
	Cluster  *Cluster
}

var _ raftlog.StateMachine = (*Machine)(nil)

// decoded is an entry whose batch was decoded.
type decoded struct {
	raftlog.Entry
	batch *rpc.CommandBatch
}

// Apply implements raftlog.StateMachine.
func (m *Machine) Apply(b *bolt.Bucket, entries []raftlog.Entry) (raftlog.Applied, error) {
	var reg []raftlog.Entry
	var cl []decoded
	for _, e := range entries {
		batch, err := rpc.DecodeBatch(e.Data)
		if err != nil {
			return raftlog.Applied{}, fmt.Errorf("metadata: entry %d: %w", e.Index, err)
		}
		if len(batch.Commands) > 0 && isClusterCommand(batch.Commands[0]) {
			for _, c := range batch.Commands[1:] {
				if !isClusterCommand(c) {
					return raftlog.Applied{}, fmt.Errorf("metadata: entry %d mixes cluster and registry commands", e.Index)
				}
			}
			cl = append(cl, decoded{Entry: e, batch: batch})
			continue
		}
		reg = append(reg, e)
	}
	var ra raftlog.Applied
	if len(reg) > 0 {
		var err error
		if ra, err = m.Registry.Apply(b, reg); err != nil {
			return raftlog.Applied{}, err
		}
	}
	ca, err := m.Cluster.applyEntries(b, cl)
	if err != nil {
		return raftlog.Applied{}, err
	}
	return raftlog.Applied{Acknowledge: both(ra.Acknowledge, ca.Acknowledge), Reveal: both(ra.Reveal, ca.Reveal)}, nil
}

// Restore implements raftlog.StateMachine.
func (m *Machine) Restore(b *bolt.Bucket) error {
	if err := m.Registry.Restore(b); err != nil {
		return err
	}
	return m.Cluster.restore(b)
}

// both runs a then b, either of which may be nil.
func both(a, b func()) func() {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func() { a(); b() }
}
