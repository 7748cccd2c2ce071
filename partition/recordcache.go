package partition

import (
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// maxCachedRecords bounds recordCache. Past it, records are written but
// not cached; a miss reads the stored bytes, so a full cache costs only
// speed.
const maxCachedRecords = 4096

// recordCache holds the pending invocation records the machine wrote to one
// state bucket in the transaction still open, as it wrote them, so a
// Complete (or AttemptFailed, Cancel) of an invocation accepted moments
// before skips the bbolt lookup and the unmarshalling of what it wrote.
// A send usually completes within raftlog's checkpoint interval, so its
// Complete applies in the transaction its Invoke applied in.
//
// It serves only what the same bucket of the same transaction stores:
//   - write-through: every record the machine stores goes through put,
//     and a purge evicts what it deletes, so a hit is the stored record
//     decoded (marshalling is deterministic, so a hit and a miss store
//     the same bytes);
//   - scoped to one *bolt.Bucket, which belongs to one transaction: apply
//     with another bucket (another transaction, or another state machine's
//     bucket in a test) starts empty, and so does a commit;
//   - a rollback undoes state the cache may hold: raftlog calls Restore
//     (Processor.Restore drops the cache) before a group that applied in
//     the lost transaction applies again, and a failed Apply drops it and
//     stops the group.
//
// Callers mutate a record returned by get and store it with put before
// the command ends, so the cached value never runs ahead of the bucket
// but within one command. Only the applier goroutine uses it.
type recordCache struct {
	bucket *bolt.Bucket // the state bucket recs were stored in; nil: empty
	recs   map[invocation.ID]*rpc.InvocationRecord
}

// use makes b the bucket the cache serves, dropping what another bucket
// left in it.
func (c *recordCache) use(b *bolt.Bucket) {
	if c.bucket == b {
		return
	}
	c.drop()
	c.bucket = b
	// Once the transaction commits the records are no longer needed; drop
	// them then rather than keep them (and the transaction's pages) alive
	// until the next Apply.
	b.Tx().OnCommit(func() {
		if c.bucket == b {
			c.drop()
		}
	})
}

func (c *recordCache) drop() {
	c.bucket = nil
	clear(c.recs)
}

// get returns id's cached record, nil if there is none.
func (c *recordCache) get(id []byte) *rpc.InvocationRecord {
	if len(id) != invocation.IDLen {
		return nil // never cached: Invoke refuses such ids
	}
	return c.recs[invocation.ID(id)]
}

// put records that rec was stored. A completed record leaves the cache:
// nothing but a duplicate command reads it again.
func (c *recordCache) put(rec *rpc.InvocationRecord) {
	if len(rec.Invoke.InvocationId) != invocation.IDLen {
		return
	}
	id := invocation.ID(rec.Invoke.InvocationId)
	if rec.State == rpc.InvocationRecord_COMPLETED {
		delete(c.recs, id)
		return
	}
	if c.recs == nil {
		c.recs = make(map[invocation.ID]*rpc.InvocationRecord)
	}
	if _, ok := c.recs[id]; ok || len(c.recs) < maxCachedRecords {
		c.recs[id] = rec
	}
}

// evict forgets id's record (deleted).
func (c *recordCache) evict(id []byte) {
	if len(id) == invocation.IDLen {
		delete(c.recs, invocation.ID(id))
	}
}
