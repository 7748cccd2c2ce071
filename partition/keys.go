package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// Key queues of keyed services (virtual objects, workflows). The exclusive
// invocations of one (service, key) run one at a time, in the order they
// entered the key:
//
//   - an exclusive Invoke that is due enters at its own apply; a delayed
//     one (not_before after proposed_at) waits in the outbox as SCHEDULED
//     and enters when the Admit the leader proposes once it is due
//     applies. Log order of those entries is queue order;
//   - entering a free key makes the invocation the key's running one and
//     puts it in the outbox; entering a held key appends it to the key's
//     queue (QUEUED, not in the outbox);
//   - completing (or cancelling) the running one hands the key to the head
//     of the queue, whose delivery is put in the outbox in the same apply;
//     cancelling a queued one removes it from the queue;
//   - shared handlers (Invoke.exclusive false) never touch the key.
//
// So the outbox holds at most one invocation per key, and no invoker, of
// this leader or the next, can start the next one before the running one's
// result is in the log.
//
//	keys      keyPrefix(service, key) → rpc.KeyState
//	keyqueue  keyPrefix(service, key) ‖ seq (8 bytes) → invocation id
var (
	keysBucket     = []byte("keys")
	keyQueueBucket = []byte("keyqueue")
)

func initKeyBuckets(b *bolt.Bucket) error {
	for _, name := range [][]byte{keysBucket, keyQueueBucket} {
		if b.Bucket(name) != nil {
			continue // cached in a write transaction: no key copy, unlike CreateBucketIfNotExists
		}
		if _, err := b.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("partition: create bucket %s: %w", name, err)
		}
	}
	return nil
}

// keyPrefix encodes (service, key) so that no key's prefix is another's:
// both parts are length-prefixed.
func keyPrefix(service, key string) []byte {
	k := make([]byte, 0, 8+len(service)+len(key))
	k = binary.BigEndian.AppendUint32(k, uint32(len(service)))
	k = append(k, service...)
	k = binary.BigEndian.AppendUint32(k, uint32(len(key)))
	return append(k, key...)
}

func queueKey(prefix []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), seq)
}

// delayedExclusive reports whether an exclusive invocation must wait for
// its due time before it enters its key.
func delayedExclusive(c *rpc.Invoke) bool {
	return c.Exclusive && c.NotBeforeUnixMs > c.ProposedAtUnixMs
}

func getKeyState(b *bolt.Bucket, prefix []byte) (*rpc.KeyState, error) {
	ks := &rpc.KeyState{}
	data := b.Bucket(keysBucket).Get(prefix)
	if data == nil {
		return ks, nil
	}
	if err := proto.Unmarshal(data, ks); err != nil {
		return nil, fmt.Errorf("partition: key state %x: %w", prefix, err)
	}
	return ks, nil
}

func putKeyState(b *bolt.Bucket, prefix []byte, ks *rpc.KeyState) error {
	kb := b.Bucket(keysBucket)
	if len(ks.Running) == 0 && ks.Queued == 0 {
		// A free key keeps nothing; next_seq may restart, as the queue
		// is empty.
		return kb.Delete(prefix)
	}
	data, err := marshalOpts.Marshal(ks)
	if err != nil {
		return fmt.Errorf("partition: marshal key state: %w", err)
	}
	return kb.Put(prefix, data)
}

// enterKey stores the new or admitted exclusive invocation rec: as its
// key's running one, with its delivery in the outbox, when the key is free;
// else at the end of the key's queue.
func (m *machine) enterKey(b *bolt.Bucket, rec *rpc.InvocationRecord, fx *effects) error {
	c := rec.Invoke
	prefix := keyPrefix(c.Service, c.Key)
	ks, err := getKeyState(b, prefix)
	if err != nil {
		return err
	}
	if len(ks.Running) == 0 {
		ks.Running = c.InvocationId
		rec.State = rpc.InvocationRecord_PENDING
		if err := putKeyState(b, prefix, ks); err != nil {
			return err
		}
		return m.startDelivery(b, rec, fx)
	}
	rec.State = rpc.InvocationRecord_QUEUED
	rec.QueueSeq = ks.NextSeq
	ks.NextSeq++
	ks.Queued++
	if err := b.Bucket(keyQueueBucket).Put(queueKey(prefix, rec.QueueSeq), c.InvocationId); err != nil {
		return fmt.Errorf("partition: queue: %w", err)
	}
	if err := putKeyState(b, prefix, ks); err != nil {
		return err
	}
	return m.storeRecord(b, rec)
}

// admit moves a SCHEDULED invocation that became due into its key; any
// other state (already admitted by an earlier leader's Admit, completed,
// cancelled, purged) makes it a no-op.
func (m *machine) admit(b *bolt.Bucket, c *rpc.Admit, fx *effects) error {
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	if err != nil || !found || rec.State != rpc.InvocationRecord_SCHEDULED {
		return err
	}
	removed, err := outbox.Remove(b, dueOf(rec), c.InvocationId)
	if err != nil {
		return err
	}
	if removed {
		fx.outboxDelta--
	}
	fx.outboxDone = append(fx.outboxDone, c.InvocationId)
	return m.enterKey(b, rec, fx)
}

// leaveKey is called when the exclusive invocation rec, in state was,
// completes: a queued one leaves the queue; the running one hands the key to
// the head of the queue.
func (m *machine) leaveKey(b *bolt.Bucket, rec *rpc.InvocationRecord, was rpc.InvocationRecord_State, fx *effects) error {
	c := rec.Invoke
	prefix := keyPrefix(c.Service, c.Key)
	ks, err := getKeyState(b, prefix)
	if err != nil {
		return err
	}
	switch {
	case was == rpc.InvocationRecord_QUEUED:
		if err := b.Bucket(keyQueueBucket).Delete(queueKey(prefix, rec.QueueSeq)); err != nil {
			return fmt.Errorf("partition: dequeue: %w", err)
		}
		ks.Queued--
		return putKeyState(b, prefix, ks)
	case !bytes.Equal(ks.Running, c.InvocationId):
		return nil // SCHEDULED: it never entered the key
	}
	ks.Running = nil
	next, err := m.nextQueued(b, prefix, ks, fx)
	if err != nil || next == nil {
		return err
	}
	if ks, err = getKeyState(b, prefix); err != nil {
		return err
	}
	if _, err := popQueue(b, prefix); err != nil {
		return err
	}
	ks.Queued--
	ks.Running = next
	if err := putKeyState(b, prefix, ks); err != nil {
		return err
	}
	nrec, found, err := m.record(b, next)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("partition: queued invocation %x has no record", next)
	}
	nrec.State = rpc.InvocationRecord_PENDING
	nrec.QueueSeq = 0
	return m.startDelivery(b, nrec, fx)
}

// nextQueued stores ks (its key no longer running) and returns the head of
// the key's queue, once the bulk operations that matched it as queued
// acted on it: one that ended it leaves the queue, and the next is looked
// at. Nil when the queue is empty.
func (m *machine) nextQueued(b *bolt.Bucket, prefix []byte, ks *rpc.KeyState, fx *effects) ([]byte, error) {
	if err := putKeyState(b, prefix, ks); err != nil {
		return nil, err
	}
	for {
		k, v := b.Bucket(keyQueueBucket).Cursor().Seek(prefix)
		if k == nil || !bytes.HasPrefix(k, prefix) || len(k) != len(prefix)+8 {
			return nil, nil
		}
		next := bytes.Clone(v)
		rec, found, err := m.record(b, next)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("partition: queued invocation %x has no record", next)
		}
		if rec, found, err = m.touch(b, rec, fx); err != nil {
			return nil, err
		}
		if found && rec.State == rpc.InvocationRecord_QUEUED {
			return next, nil
		}
	}
}

// popQueue removes and returns the head of a key's queue (nil if empty).
func popQueue(b *bolt.Bucket, prefix []byte) ([]byte, error) {
	q := b.Bucket(keyQueueBucket)
	k, v := q.Cursor().Seek(prefix)
	if k == nil || !bytes.HasPrefix(k, prefix) || len(k) != len(prefix)+8 {
		return nil, nil
	}
	id := append([]byte(nil), v...)
	if err := q.Delete(k); err != nil {
		return nil, fmt.Errorf("partition: dequeue: %w", err)
	}
	return id, nil
}

// queuePosition counts the invocations ahead of a queued one.
func queuePosition(b *bolt.Bucket, rec *rpc.InvocationRecord) uint64 {
	prefix := keyPrefix(rec.Invoke.Service, rec.Invoke.Key)
	end := queueKey(prefix, rec.QueueSeq)
	var n uint64
	c := b.Bucket(keyQueueBucket).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.Compare(k, end) < 0; k, _ = c.Next() {
		n++
	}
	return n
}

// readKeyStatus returns the running invocation and queue length of a key.
func readKeyStatus(b *bolt.Bucket, service, key string) (*rpc.KeyState, error) {
	if b.Bucket(keysBucket) == nil {
		return &rpc.KeyState{}, nil
	}
	ks, err := getKeyState(b, keyPrefix(service, key))
	if err != nil {
		return nil, err
	}
	return &rpc.KeyState{Running: ks.Running, Queued: ks.Queued}, nil
}

// KeyStatus returns the running invocation and queue length of (service,
// key); linearizable like Status. A key with neither is an empty KeyState.
// The caller routes the key to its partition (invocation.KeyedPartitionKey).
func (p *Processor) KeyStatus(ctx context.Context, service, key string) (*rpc.KeyState, error) {
	if leading, _, _ := p.tracker.Leadership(); !leading || !p.isStarted() {
		return nil, p.tracker.NotLeader()
	}
	if err := p.log.ReadIndex(ctx); err != nil {
		return nil, p.mapLogError(err)
	}
	var ks *rpc.KeyState
	err := p.log.View(ctx, func(b *bolt.Bucket) error {
		var err error
		ks, err = readKeyStatus(b, service, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("partition: key status: %w", err)
	}
	return ks, nil
}
