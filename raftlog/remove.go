package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/raftgate/raftgate/raftlog/wal"
)

// ErrNoGroup: RemoveGroup was called for a group this node does not run.
var ErrNoGroup = errors.New("raftlog: no such group")

// bucketRemoved, in the node bucket, holds a tombstone per group whose
// removal has deleted its state but may not have dropped its log yet.
var bucketRemoved = []byte("removed")

// RemoveGroup stops group id on this node and deletes this node's replica
// of it: its state from state.db, then its log from the write-ahead log,
// each durable before the next step and both before it returns. It is how
// a replica leaves a node: the group no longer includes this node, or the
// group is retired. Proposals and reads under way end with ErrStopped, and
// watchers see the group led by nobody here.
//
// A crash part way is finished when the node opens again: the state goes
// in one transaction that leaves a tombstone, and Open drops the log of
// every tombstoned group before anything else. The id may be added again
// later; it starts as an empty replica, which a running group brings up to
// date (a snapshot, or its log).
func (n *Node) RemoveGroup(id GroupID) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrStopped
	}
	g := n.groups[id]
	if g == nil {
		n.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrNoGroup, id)
	}
	delete(n.groups, id) // from now on its messages are dropped
	n.removing[id] = true
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.removing, id)
		n.mu.Unlock()
	}()

	// The loop is the only submitter of the group's log writes and
	// applies, so once it has ended everything of the group is queued
	// ahead of what follows, and runs first.
	g.stop()
	g.publishLeader(0, g.rn.BasicStatus().GetTerm(), false)
	n.metrics.appliedIndex.DeleteLabelValues(strconv.FormatUint(uint64(id), 10))

	if err := n.updateState(func(tx *bolt.Tx) error { return removeGroupState(tx, id) }); err != nil {
		return fmt.Errorf("raftlog: remove group %d: delete its state: %w", id, err)
	}
	if k := n.cfg.Knobs; k != nil && k.AfterRemoveState != nil {
		if err := k.AfterRemoveState(); err != nil {
			return err
		}
	}
	if err := n.finishRemoval(id); err != nil {
		return err
	}
	n.log.Info().Uint32("group", uint32(id)).Msg("group removed from this node (state and log deleted)")
	return nil
}

// finishRemoval is what follows a removal's durable state deletion: the
// group's log goes, then its tombstone.
func (n *Node) finishRemoval(id GroupID) error {
	if err := n.dropLog(id); err != nil {
		return err
	}
	if k := n.cfg.Knobs; k != nil && k.AfterRemoveLog != nil {
		if err := k.AfterRemoveLog(); err != nil {
			return err
		}
	}
	if err := n.updateState(func(tx *bolt.Tx) error { return clearTombstone(tx, id) }); err != nil {
		return fmt.Errorf("raftlog: remove group %d: clear its tombstone: %w", id, err)
	}
	return nil
}

// finishRemovals completes the removals a crash interrupted: each
// tombstoned group's state is gone, and its log may still be in the
// write-ahead log. Open runs it before any group is added.
func (n *Node) finishRemovals() error {
	var ids []GroupID
	err := n.db.View(func(tx *bolt.Tx) error {
		removed := tombstones(tx)
		if removed == nil {
			return nil
		}
		return removed.ForEach(func(k, _ []byte) error {
			if len(k) != 4 {
				return fmt.Errorf("tombstone %x: %w", k, errCorrupt)
			}
			ids = append(ids, GroupID(binary.BigEndian.Uint32(k)))
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("raftlog: read removed groups: %w", err)
	}
	for _, id := range ids {
		if err := n.finishRemoval(id); err != nil {
			return err
		}
		n.log.Info().Uint32("group", uint32(id)).Msg("finished removing a group that a restart interrupted")
	}
	return nil
}

// dropLog drops group id's records from the write-ahead log (fsynced), if
// it has any.
func (n *Node) dropLog(id GroupID) error {
	if !slices.Contains(n.wal.Groups(), uint32(id)) {
		return nil
	}
	if err := n.lw.write(func(b *wal.Batch) { b.DropGroup(uint32(id)) }); err != nil {
		return fmt.Errorf("raftlog: remove group %d: drop its log: %w", id, err)
	}
	return nil
}

// updateState runs update in the applier's transaction and waits until it
// is checkpointed.
func (n *Node) updateState(update func(*bolt.Tx) error) error {
	r := &applyReq{update: update, done: make(chan struct{})}
	if !n.ap.submit(r) {
		return ErrStopped
	}
	n.ap.runIfStepped()
	<-r.done
	return r.err
}

// removeGroupState deletes group id's buckets and tombstones it, in one
// transaction.
func removeGroupState(tx *bolt.Tx, id GroupID) error {
	if tx.Bucket(groupBucketName(id)) != nil {
		if err := tx.DeleteBucket(groupBucketName(id)); err != nil {
			return err
		}
	}
	node, err := tx.CreateBucketIfNotExists(bucketNode)
	if err != nil {
		return err
	}
	removed, err := node.CreateBucketIfNotExists(bucketRemoved)
	if err != nil {
		return err
	}
	return removed.Put(tombstoneKey(id), []byte{})
}

func clearTombstone(tx *bolt.Tx, id GroupID) error {
	if removed := tombstones(tx); removed != nil {
		return removed.Delete(tombstoneKey(id))
	}
	return nil
}

// tombstones is the bucket of removed groups' tombstones, nil if none was
// ever written.
func tombstones(tx *bolt.Tx) *bolt.Bucket {
	if node := tx.Bucket(bucketNode); node != nil {
		return node.Bucket(bucketRemoved)
	}
	return nil
}

func tombstoneKey(id GroupID) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(id))
}
