package partition

import (
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// Bounds of recordCache. Past them, records are stored but not cached; a
// miss reads the stored bytes, so a full cache costs only speed.
const (
	maxCachedRecords = 4096
	maxCachedBytes   = 16 << 20 // request bodies, mostly
	// cachedRecordOverhead is what a record costs besides its body, about.
	cachedRecordOverhead = 256
)

// recordCache holds the pending invocation records the machine stored, as
// it stored them, so that a Complete (or AttemptFailed, Cancel) of an
// invocation accepted earlier skips the bbolt lookup and the unmarshalling
// of what it wrote.
//
// A hit is what the bucket holds:
//   - write-through: every record the machine stores goes through put
//     (a completed one leaves the cache), and a purge evicts what it
//     deletes, so a hit is the stored record decoded (marshalling is
//     deterministic, so a hit and a miss store the same bytes);
//   - what a transaction cached is kept once it commits. If it ends
//     otherwise (raftlog rolls it back when an Apply in it fails, and
//     stops), the next use drops everything: a rollback may undo what the
//     cache holds. So do Restore (Processor.Restore: a snapshot replaced
//     the bucket) and a failed Apply;
//   - one state bucket: a machine applies only to its group's bucket, but
//     a use with another bucket while the last one's transaction is open
//     (another state machine's bucket, in tests) or of another database
//     drops everything too.
//
// Callers mutate a record returned by get and store it with put before
// the command ends, so the cached value never runs ahead of the bucket
// but within one command. Only the applier goroutine uses it.
type recordCache struct {
	db *bolt.DB // the database recs are stored in
	// bucket is the state bucket of the open transaction the cache was
	// last used with; nil once that transaction committed.
	bucket *bolt.Bucket
	recs   map[invocation.ID]cachedRecord
	bytes  int // the sizes of recs
}

type cachedRecord struct {
	rec  *rpc.InvocationRecord
	size int
}

// use makes b the bucket the cache serves.
func (c *recordCache) use(b *bolt.Bucket) {
	if c.bucket == b {
		return
	}
	tx := b.Tx()
	if c.bucket != nil || tx.DB() != c.db {
		// The last transaction did not commit (rolled back, or still open
		// with b another bucket of it), or b is in another database.
		c.drop()
	}
	c.db, c.bucket = tx.DB(), b
	tx.OnCommit(func() {
		if c.bucket == b {
			c.bucket = nil // durable: kept, and the transaction not held
		}
	})
}

func (c *recordCache) drop() {
	clear(c.recs)
	c.bytes = 0
}

// get returns id's cached record, nil if there is none.
func (c *recordCache) get(id []byte) *rpc.InvocationRecord {
	if len(id) != invocation.IDLen {
		return nil // never cached: Invoke refuses such ids
	}
	return c.recs[invocation.ID(id)].rec
}

// put records that rec was stored. A completed record leaves the cache:
// nothing but a duplicate command reads it again.
func (c *recordCache) put(rec *rpc.InvocationRecord) {
	if len(rec.Invoke.InvocationId) != invocation.IDLen {
		return
	}
	id := invocation.ID(rec.Invoke.InvocationId)
	c.evictID(id)
	if rec.State == rpc.InvocationRecord_COMPLETED {
		return
	}
	size := len(rec.Invoke.Body) + cachedRecordOverhead
	if len(c.recs) >= maxCachedRecords || c.bytes+size > maxCachedBytes {
		return
	}
	if c.recs == nil {
		c.recs = make(map[invocation.ID]cachedRecord)
	}
	c.recs[id] = cachedRecord{rec: rec, size: size}
	c.bytes += size
}

// evict forgets id's record (deleted).
func (c *recordCache) evict(id []byte) {
	if len(id) == invocation.IDLen {
		c.evictID(invocation.ID(id))
	}
}

func (c *recordCache) evictID(id invocation.ID) {
	if old, ok := c.recs[id]; ok {
		c.bytes -= old.size
		delete(c.recs, id)
	}
}
