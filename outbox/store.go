package outbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// queueBucket: due (8 bytes big-endian unix ms) ‖ id → attempts (4 bytes
// big-endian) ‖ [0 ‖ started until (8 bytes big-endian unix ms)] ‖
// service name, so a scan can apply per-service limits without reading
// invocation records. The optional started mark (MarkStarted) is told
// apart by its 0 byte: a service name never starts with one.
// There is no index by id: the caller (the state machine) keeps each
// entry's due time in its invocation record, so every change touches one
// key, near the queue's ends, instead of a random one.
var queueBucket = []byte("outbox")

// ErrCorrupt is returned (wrapped) when a stored entry cannot be decoded.
var ErrCorrupt = errors.New("outbox: corrupt entry")

// Entry is one delivery waiting in the queue.
type Entry struct {
	ID []byte
	// Due is the earliest time (unix ms) to deliver it.
	Due int64
	// Attempts counts the failed delivery attempts recorded so far.
	Attempts uint32
	// Service is the invoked service's name.
	Service string
	// StartedUntil, when not 0, is the end (unix ms) of a delivery under
	// way that a leader marked (MarkStarted).
	StartedUntil int64
}

// fillPercent is how full bbolt fills a page of the outbox before it
// splits one: keys start with the due time, so entries mostly join at the
// right and leave from the left; bbolt's default (half) would leave every
// page a split left behind half empty.
const fillPercent = 0.9

// Init creates the outbox's bucket beneath parent (a writable bucket) and
// sets its fill percent, which bbolt keeps per transaction: call it in
// every write transaction before writing the outbox.
func Init(parent *bolt.Bucket) error {
	if q := parent.Bucket(queueBucket); q != nil {
		q.FillPercent = fillPercent
		return nil // cached in a write transaction: no key copy, unlike CreateBucketIfNotExists
	}
	q, err := parent.CreateBucketIfNotExists(queueBucket)
	if err != nil {
		return fmt.Errorf("outbox: create bucket: %w", err)
	}
	q.FillPercent = fillPercent
	return nil
}

// Put queues e. parent must have been Init-ed.
func Put(parent *bolt.Bucket, e Entry) error {
	q := parent.Bucket(queueBucket)
	if q == nil {
		return fmt.Errorf("outbox: put: %w", bolt.ErrBucketNotFound)
	}
	// Key and value in one allocation: bbolt copies the key, and keeps only
	// the value until the transaction commits.
	kv := appendQueueKey(make([]byte, 0, 8+len(e.ID)+4+9+len(e.Service)), e.Due, e.ID)
	key, v := kv[:len(kv):len(kv)], kv[len(kv):]
	v = binary.BigEndian.AppendUint32(v, e.Attempts)
	if e.StartedUntil != 0 {
		v = binary.BigEndian.AppendUint64(append(v, 0), uint64(e.StartedUntil))
	}
	v = append(v, e.Service...)
	if err := q.Put(key, v); err != nil {
		return fmt.Errorf("outbox: put: %w", err)
	}
	return nil
}

// Move reschedules the delivery of e.ID queued at oldDue to e.Due and
// e.Attempts. It reports whether it was queued at oldDue (it is queued
// afterwards either way).
func Move(parent *bolt.Bucket, oldDue int64, e Entry) (bool, error) {
	removed, err := Remove(parent, oldDue, e.ID)
	if err != nil {
		return false, err
	}
	return removed, Put(parent, e)
}

// Remove drops the delivery of id queued at due. It reports whether one
// was queued.
func Remove(parent *bolt.Bucket, due int64, id []byte) (bool, error) {
	q := parent.Bucket(queueBucket)
	if q == nil {
		return false, nil
	}
	// One seek, where Get then Delete would search the tree twice.
	key := queueKey(due, id)
	c := q.Cursor()
	if k, _ := c.Seek(key); !bytes.Equal(k, key) {
		return false, nil
	}
	if err := c.Delete(); err != nil {
		return false, fmt.Errorf("outbox: remove: %w", err)
	}
	return true, nil
}

// MarkStarted marks the delivery of id queued at due as under way until
// until (unix ms). It reports whether one was queued. Put, Move and Remove
// drop the mark with the entry they replace.
func MarkStarted(parent *bolt.Bucket, due int64, id []byte, until int64) (bool, error) {
	e, found, err := Get(parent, due, id)
	if err != nil || !found {
		return false, err
	}
	e.StartedUntil = until
	return true, Put(parent, e)
}

// Get returns the delivery of id queued at due.
func Get(parent *bolt.Bucket, due int64, id []byte) (Entry, bool, error) {
	q := parent.Bucket(queueBucket)
	if q == nil {
		return Entry{}, false, nil
	}
	key := queueKey(due, id)
	v := q.Get(key)
	if v == nil {
		return Entry{}, false, nil
	}
	e, err := decode(key, v)
	if err != nil {
		return Entry{}, false, err
	}
	return e.Entry(), true, nil
}

// Scan calls fn for queued deliveries in (due, id) order, starting at the
// first, until fn returns false or the queue ends. The Entry's ID is a copy
// that fn may keep.
func Scan(parent *bolt.Bucket, fn func(Entry) bool) error {
	return ScanQueued(parent, func(q Queued) bool { return fn(q.Entry()) })
}

// Queued is a delivery as ScanQueued reads it in place: ID and Service
// alias the queue's storage, valid only during the call, so a scan that
// passes over most entries (the invoker's, over those it delivers already)
// copies nothing for them.
type Queued struct {
	Due          int64
	ID           []byte
	Attempts     uint32
	Service      []byte
	StartedUntil int64
}

// Entry returns a copy of q that may be kept.
func (q Queued) Entry() Entry {
	return Entry{ID: append([]byte(nil), q.ID...), Due: q.Due, Attempts: q.Attempts, Service: string(q.Service), StartedUntil: q.StartedUntil}
}

// Next returns the first queue key after q's, for ScanQueuedFrom.
func (q Queued) Next() []byte {
	return append(q.AppendKey(make([]byte, 0, 8+len(q.ID)+1)), 0)
}

// AppendKey appends q's queue key to b: keys order as ScanQueuedFrom
// walks them, and a key is a start for it.
func (q Queued) AppendKey(b []byte) []byte {
	return appendQueueKey(b, q.Due, q.ID)
}

// StartOf returns the first queue key a delivery due at due can have, for
// ScanQueuedFrom.
func StartOf(due int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(clampDue(due)))
}

// ScanQueued is Scan without the copies: fn must copy (Queued.Entry)
// what it keeps past its call.
func ScanQueued(parent *bolt.Bucket, fn func(Queued) bool) error {
	return ScanQueuedFrom(parent, nil, fn)
}

// ScanQueuedFrom is ScanQueued from the first key not before from (a key
// of Queued.Next or StartOf; nil: the first).
func ScanQueuedFrom(parent *bolt.Bucket, from []byte, fn func(Queued) bool) error {
	q := parent.Bucket(queueBucket)
	if q == nil {
		return nil
	}
	c := q.Cursor()
	k, v := c.First()
	if from != nil {
		k, v = c.Seek(from)
	}
	for ; k != nil; k, v = c.Next() {
		e, err := decode(k, v)
		if err != nil {
			return err
		}
		if !fn(e) {
			return nil
		}
	}
	return nil
}

// Count returns the number of queued deliveries. It walks the queue, so
// call it only when (re)building a counter.
func Count(parent *bolt.Bucket) int {
	q := parent.Bucket(queueBucket)
	if q == nil {
		return 0
	}
	n := 0
	c := q.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	return n
}

func queueKey(due int64, id []byte) []byte {
	return appendQueueKey(make([]byte, 0, 8+len(id)), due, id)
}

// appendQueueKey appends queueKey(due, id) to b.
func appendQueueKey(b []byte, due int64, id []byte) []byte {
	return append(binary.BigEndian.AppendUint64(b, uint64(clampDue(due))), id...)
}

func decode(k, v []byte) (Queued, error) {
	if len(k) <= 8 || len(v) < 4 {
		return Queued{}, fmt.Errorf("%w: key %x", ErrCorrupt, k)
	}
	q := Queued{
		ID:       k[8:],
		Due:      int64(binary.BigEndian.Uint64(k)),
		Attempts: binary.BigEndian.Uint32(v),
		Service:  v[4:],
	}
	if len(q.Service) > 0 && q.Service[0] == 0 {
		if len(q.Service) < 9 {
			return Queued{}, fmt.Errorf("%w: key %x", ErrCorrupt, k)
		}
		q.StartedUntil = int64(binary.BigEndian.Uint64(q.Service[1:9]))
		q.Service = q.Service[9:]
	}
	return q, nil
}

// clampDue keeps keys ordered: times before the epoch sort as the epoch.
func clampDue(due int64) int64 { return max(due, 0) }
