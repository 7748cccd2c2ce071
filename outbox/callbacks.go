package outbox

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// callbackBucket: due (8 bytes big-endian unix ms) ‖ invocation id →
// attempts (4 bytes big-endian): the completion callbacks still to be
// POSTed. A queue of its own beside the deliveries, so that callbacks
// never hold up (or count against the limits of) invocations. Created by
// the first callback, so state without callbacks is unchanged.
var callbackBucket = []byte("callbacks")

// PutCallback queues the callback of invocation e.ID due at e.Due
// (e.Service is ignored).
func PutCallback(parent *bolt.Bucket, e Entry) error {
	q, err := parent.CreateBucketIfNotExists(callbackBucket)
	if err != nil {
		return fmt.Errorf("outbox: callbacks bucket: %w", err)
	}
	q.FillPercent = fillPercent
	if err := q.Put(queueKey(e.Due, e.ID), binary.BigEndian.AppendUint32(nil, e.Attempts)); err != nil {
		return fmt.Errorf("outbox: put callback: %w", err)
	}
	return nil
}

// RemoveCallback drops the callback of id queued at due. It reports
// whether one was queued.
func RemoveCallback(parent *bolt.Bucket, due int64, id []byte) (bool, error) {
	q := parent.Bucket(callbackBucket)
	if q == nil {
		return false, nil
	}
	key := queueKey(due, id)
	if q.Get(key) == nil {
		return false, nil
	}
	if err := q.Delete(key); err != nil {
		return false, fmt.Errorf("outbox: remove callback: %w", err)
	}
	return true, nil
}

// ScanCallbacks calls fn for queued callbacks in (due, id) order until fn
// returns false or the queue ends. The Entry's ID is a copy fn may keep.
func ScanCallbacks(parent *bolt.Bucket, fn func(Entry) bool) error {
	q := parent.Bucket(callbackBucket)
	if q == nil {
		return nil
	}
	c := q.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		e, err := decode(k, v)
		if err != nil {
			return err
		}
		if !fn(e.Entry()) {
			return nil
		}
	}
	return nil
}
