package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// Flow shares: the split of each cluster-wide concurrency limit among the
// partitions (docs/operations.md, "Protecting services"). A limit's record
// gives each partition a share and a ceiling: the share is what the
// partition may have in flight once it adopted it (through its own log),
// the ceiling what it may still have in flight, which stays at the old
// share after a lowering until the partition reports that it adopted the
// lower one and drained down to it. The ceilings add up to at most the
// figure, so the in-flight deliveries of all partitions do; a share is
// raised only within the room the ceilings leave. Records change by
// compare-and-swap (SetFlowShares); PlanShares, on the metadata leader,
// plans the changes from the partitions' demand reports.

var bucketShares = []byte("flowshares")

// FlowShares returns the split of limit key, if one was recorded.
func (s *State) FlowShares(key string) (*rpc.FlowShares, bool) {
	i, ok := slices.BinarySearchFunc(s.Shares, key, func(f *rpc.FlowShares, k string) int { return strings.Compare(f.Key, k) })
	if !ok {
		return nil, false
	}
	return s.Shares[i], true
}

func (s *State) setShares(f *rpc.FlowShares) {
	i, found := slices.BinarySearchFunc(s.Shares, f.Key, func(x *rpc.FlowShares, k string) int { return strings.Compare(x.Key, k) })
	if found {
		s.Shares[i] = f
		return
	}
	s.Shares = slices.Insert(s.Shares, i, f)
}

// SetFlowShares changes the splits of limits, each only if its Version is
// the stored one (0: none yet); ErrStateConflict otherwise. The parts'
// versions are set by the record.
func (c *Cluster) SetFlowShares(ctx context.Context, shares []*rpc.FlowShares) error {
	rid := invocation.NewRequestID()
	_, err := c.propose(ctx, rid, &rpc.Command{Cmd: &rpc.Command_SetFlowShares{SetFlowShares: &rpc.SetFlowShares{RequestId: rid, Shares: shares}}})
	return err
}

// setFlowShares applies SetFlowShares: every part's share is within its
// ceiling, and a ceiling rises only if the ceilings then add up to at most
// the figure. A part's version is bumped when its share changes, and on
// the record's creation.
func (t *tx) setFlowShares(index uint64, cmd *rpc.SetFlowShares) error {
	s := t.next
	if s.ID == nil {
		return ErrNoCluster
	}
	for _, in := range cmd.Shares {
		cur, _ := s.FlowShares(in.Key)
		if err := checkShares(cur, in); err != nil {
			return err
		}
	}
	next := t.mutable(index)
	for _, in := range cmd.Shares {
		cur, _ := next.FlowShares(in.Key)
		f := nextShares(cur, in)
		next.setShares(f)
		if err := t.putShares(f); err != nil {
			return err
		}
	}
	return nil
}

// checkShares refuses a change in of the split cur (nil: none yet).
func checkShares(cur, in *rpc.FlowShares) error {
	if cur != nil && cur.Version != in.Version || cur == nil && in.Version != 0 {
		return fmt.Errorf("%w: the split of %q changed meanwhile", ErrStateConflict, in.Key)
	}
	if in.Key == "" || len(in.Parts) == 0 || cur != nil && len(in.Parts) != len(cur.Parts) {
		return fmt.Errorf("cluster: split of %q into %d parts: %w", in.Key, len(in.Parts), rpc.ErrInvalid)
	}
	var sum uint64
	raised := cur == nil
	for i, p := range in.Parts {
		if p.Share > p.Ceiling {
			return fmt.Errorf("cluster: split of %q: partition %d's share %d above its ceiling %d: %w", in.Key, i+1, p.Share, p.Ceiling, rpc.ErrInvalid)
		}
		sum += uint64(p.Ceiling)
		if cur != nil && p.Ceiling > cur.Parts[i].Ceiling {
			raised = true
		}
	}
	if raised && sum > uint64(in.Figure) {
		return fmt.Errorf("cluster: split of %q: ceilings add up to %d, above %d: %w", in.Key, sum, in.Figure, rpc.ErrInvalid)
	}
	return nil
}

// nextShares is the split that change in makes of cur (nil: none yet).
func nextShares(cur, in *rpc.FlowShares) *rpc.FlowShares {
	f := &rpc.FlowShares{Key: in.Key, Figure: in.Figure, Version: in.Version + 1}
	for i, p := range in.Parts {
		part := &rpc.FlowShare{Share: p.Share, Ceiling: p.Ceiling, Version: 1}
		if cur != nil {
			part.Version = cur.Parts[i].Version
			if p.Share != cur.Parts[i].Share {
				part.Version++
			}
		}
		f.Parts = append(f.Parts, part)
	}
	return f
}

func (t *tx) putShares(f *rpc.FlowShares) error {
	b, err := t.b.CreateBucketIfNotExists(bucketShares)
	if err != nil {
		return storeError{err}
	}
	data, err := storeMarshal.Marshal(f)
	if err != nil {
		return storeError{err}
	}
	if err := b.Put([]byte(f.Key), data); err != nil {
		return storeError{err}
	}
	return nil
}

// loadShares reads the splits beneath the cluster bucket b.
func loadShares(b *bolt.Bucket, s *State) error {
	sb := b.Bucket(bucketShares)
	if sb == nil {
		return nil
	}
	return sb.ForEach(func(k, v []byte) error {
		f := &rpc.FlowShares{}
		if err := proto.Unmarshal(v, f); err != nil {
			return fmt.Errorf("cluster: flow shares %q: %w", k, err)
		}
		s.Shares = append(s.Shares, f) // keys in order
		return nil
	})
}
