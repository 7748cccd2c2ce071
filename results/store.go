package results

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// resultBucket: completed_at (8 bytes big-endian unix ms) ‖ id → marshalled
// rpc.InvocationResult. Keyed by completion time first, so that storing a
// result appends near the end of the tree (no random page write) and Purge
// walks a prefix. The caller keeps each result's completion time beside its
// id (the invocation record) to find it.
var resultBucket = []byte("results")

// ErrCorrupt is returned (wrapped) when a stored result cannot be decoded.
var ErrCorrupt = errors.New("results: corrupt entry")

// marshal is deterministic so that every replica stores the same bytes.
var marshal = proto.MarshalOptions{Deterministic: true}

// sizedMarshal marshals a message marshal.Size just measured, reusing the
// sizes it cached.
var sizedMarshal = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}

// fillPercent is how full bbolt fills a page of the results bucket before
// it splits one: keys grow with completion time, so pages fill from the
// right and a page left behind by a split gets no more keys; bbolt's
// default (half) would leave it half empty for good.
const fillPercent = 0.9

// Init creates the results bucket beneath parent (a writable bucket) and
// sets its fill percent, which bbolt keeps per transaction: call it in
// every write transaction before writing results.
func Init(parent *bolt.Bucket) error {
	if rb := parent.Bucket(resultBucket); rb != nil {
		rb.FillPercent = fillPercent
		return nil // cached in a write transaction: no key copy, unlike CreateBucketIfNotExists
	}
	rb, err := parent.CreateBucketIfNotExists(resultBucket)
	if err != nil {
		return fmt.Errorf("results: create bucket: %w", err)
	}
	rb.FillPercent = fillPercent
	return nil
}

// Put stores r under (r.CompletedAtUnixMs, r.InvocationId).
func Put(parent *bolt.Bucket, r *rpc.InvocationResult) error {
	rb := parent.Bucket(resultBucket)
	if rb == nil {
		return fmt.Errorf("results: put: %w", bolt.ErrBucketNotFound)
	}
	// Key and value in one allocation: bbolt copies the key, and keeps only
	// the value until the transaction commits.
	key := appendTimeKey(make([]byte, 0, 8+len(r.InvocationId)+marshal.Size(r)), r.CompletedAtUnixMs, r.InvocationId)
	kv, err := sizedMarshal.MarshalAppend(key, r)
	if err != nil {
		return fmt.Errorf("results: marshal: %w", err)
	}
	key, data := kv[:len(key):len(key)], kv[len(key):]
	if err := rb.Put(key, data); err != nil {
		return fmt.Errorf("results: put: %w", err)
	}
	return nil
}

// Get returns the result of id completed at completedAt.
func Get(parent *bolt.Bucket, completedAt int64, id []byte) (*rpc.InvocationResult, bool, error) {
	rb := parent.Bucket(resultBucket)
	if rb == nil {
		return nil, false, nil
	}
	data := rb.Get(timeKey(completedAt, id))
	if data == nil {
		return nil, false, nil
	}
	r := &rpc.InvocationResult{}
	if err := proto.Unmarshal(data, r); err != nil {
		return nil, false, fmt.Errorf("%w: %x: %w", ErrCorrupt, id, err)
	}
	return r, true, nil
}

// Delete drops the result of id completed at completedAt (an operator's
// purge of one invocation); deleting a missing one is no error.
func Delete(parent *bolt.Bucket, completedAt int64, id []byte) error {
	rb := parent.Bucket(resultBucket)
	if rb == nil {
		return nil
	}
	if err := rb.Delete(timeKey(completedAt, id)); err != nil {
		return fmt.Errorf("results: delete: %w", err)
	}
	return nil
}

// Purge deletes the results completed before beforeUnixMs, oldest first,
// at most limit of them (0: every one), and calls purged with each deleted
// id (so the caller can drop what it keeps beside the result). It returns
// how many were deleted. A limit keeps one apply's work bounded however
// much has expired; the caller proposes again while more has.
func Purge(parent *bolt.Bucket, beforeUnixMs int64, limit int, purged func(id []byte) error) (int, error) {
	rb := parent.Bucket(resultBucket)
	if rb == nil {
		return 0, nil
	}
	// Collect first: deleting under a live cursor may skip keys.
	var keys [][]byte
	c := rb.Cursor()
	for k, _ := c.First(); k != nil && completedAt(k) < beforeUnixMs && (limit == 0 || len(keys) < limit); k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := rb.Delete(k); err != nil {
			return 0, fmt.Errorf("results: purge: %w", err)
		}
		if purged != nil {
			if err := purged(k[8:]); err != nil {
				return 0, err
			}
		}
	}
	return len(keys), nil
}

// Oldest returns the completion time of the oldest stored result, so a
// sweeper proposes Purge only when something has expired.
func Oldest(parent *bolt.Bucket) (int64, bool) {
	rb := parent.Bucket(resultBucket)
	if rb == nil {
		return 0, false
	}
	k, _ := rb.Cursor().First()
	if k == nil {
		return 0, false
	}
	return completedAt(k), true
}

// Newest returns the completion time of the newest stored result: a time
// some proposer stamped, which the sweeper uses to bound its own clock.
func Newest(parent *bolt.Bucket) (int64, bool) {
	rb := parent.Bucket(resultBucket)
	if rb == nil {
		return 0, false
	}
	k, _ := rb.Cursor().Last()
	if k == nil {
		return 0, false
	}
	return completedAt(k), true
}

func timeKey(at int64, id []byte) []byte {
	return appendTimeKey(make([]byte, 0, 8+len(id)), at, id)
}

// appendTimeKey appends timeKey(at, id) to b.
func appendTimeKey(b []byte, at int64, id []byte) []byte {
	return append(binary.BigEndian.AppendUint64(b, uint64(max(at, 0))), id...)
}

func completedAt(k []byte) int64 {
	if len(k) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(k))
}
