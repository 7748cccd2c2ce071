package partition

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/raftgate/raftgate/results"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// Bulk operations: an action (cancel, kill, pause, resume, purge) on
// exactly the invocations that match a filter at the log position of the
// Bulk command, applied in chunks so the partition keeps serving.
//
// The Bulk command records the operation: its log index L and the newest
// listing position then. Each BulkStep walks the next Chunk entries of the
// listing index in ascending order up to that position and applies the
// action to those that match; a record created after L was marked visited
// when it was created (markNew), so the walk passes it over. A record
// not yet walked keeps its state at L until something changes it, so any
// command that changes a record (Complete, Cancel, AttemptFailed, Admit, a
// key handing over to its next invocation, another action, a retention
// purge) first lets every running operation act on it, in log order of
// their Bulks, and marks it visited (touch): the outcome is the one of
// applying each Bulk at once at its log position. Steps always walk the
// oldest running operation, so a newer operation sees the older one's
// effects, as their log order says. A step of a finished operation is a
// no-op, so any leader may propose one (bulkLoop).
//
//	operations        op id → rpc.Operation
//	operationsactive  L (8 bytes) ‖ op id → nil   (running ones, in log order)
//	operationsvisited op id ‖ 0 ‖ listing position → nil   (touched ahead of the walk)
var (
	operationsBucket        = []byte("operations")
	operationsActiveBucket  = []byte("operationsactive")
	operationsVisitedBucket = []byte("operationsvisited")
)

// DefaultBulkChunk is how many listing entries one BulkStep walks at most.
const DefaultBulkChunk = 64

func getOperation(b *bolt.Bucket, id string) (*rpc.Operation, bool, error) {
	data := b.Bucket(operationsBucket).Get([]byte(id))
	if data == nil {
		return nil, false, nil
	}
	op := &rpc.Operation{}
	if err := proto.Unmarshal(data, op); err != nil {
		return nil, false, fmt.Errorf("partition: operation %q: %w", id, err)
	}
	return op, true, nil
}

func putOperation(b *bolt.Bucket, op *rpc.Operation) error {
	data, err := marshalOpts.Marshal(op)
	if err != nil {
		return fmt.Errorf("partition: marshal operation: %w", err)
	}
	return b.Bucket(operationsBucket).Put([]byte(op.Id), data)
}

func activeKey(op *rpc.Operation) []byte {
	return append(binary.BigEndian.AppendUint64(nil, op.LogIndex), op.Id...)
}

func visitedKey(opID string, pos []byte) []byte {
	return append(append([]byte(opID), 0), pos...)
}

// bulk records a new operation; a known operation id is a no-op.
func (m *machine) bulk(b *bolt.Bucket, term uint64, c *rpc.Bulk, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term}
	defer func() { fx.replies = append(fx.replies, r) }()
	if c.OperationId == "" || c.Action == rpc.BulkAction_BULK_UNSPECIFIED {
		r.err = fmt.Errorf("partition: bulk: operation id and action are required: %w", rpc.ErrInvalid)
		return nil
	}
	if _, found, err := getOperation(b, c.OperationId); err != nil || found {
		return err
	}
	op := &rpc.Operation{
		Id:              c.OperationId,
		Action:          c.Action,
		Filter:          bulkFilter(c.Filter),
		LogIndex:        m.index,
		Chunk:           c.Chunk,
		StartedAtUnixMs: c.ProposedAtUnixMs,
	}
	if op.Chunk == 0 {
		op.Chunk = DefaultBulkChunk
	}
	last, _ := b.Bucket(createdBucket).Cursor().Last()
	if last == nil {
		op.Done, op.FinishedAtUnixMs = true, c.ProposedAtUnixMs
		return putOperation(b, op)
	}
	op.LastPosition = bytes.Clone(last)
	if err := b.Bucket(operationsActiveBucket).Put(activeKey(op), nil); err != nil {
		return fmt.Errorf("partition: bulk: %w", err)
	}
	fx.bulkActive = true
	return putOperation(b, op)
}

// purgeOperations drops the operations that finished before before, as
// retention drops results (a few per partition: it reads them all).
func purgeOperations(b *bolt.Bucket, before int64) error {
	ob := b.Bucket(operationsBucket)
	var expired [][]byte
	err := ob.ForEach(func(k, v []byte) error {
		op := &rpc.Operation{}
		if err := proto.Unmarshal(v, op); err != nil {
			return fmt.Errorf("partition: operation %q: %w", k, err)
		}
		if op.Done && op.FinishedAtUnixMs < before {
			expired = append(expired, bytes.Clone(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range expired {
		if err := ob.Delete(k); err != nil {
			return fmt.Errorf("partition: purge operation: %w", err)
		}
	}
	return nil
}

// markNew marks a record created at listing position pos visited by every
// running operation: it did not exist at their Bulks' log positions, so
// none may act on it, even when its position is among those a walk still
// has to reach (an older timestamp, a Bulk earlier in the same entry).
func markNew(b *bolt.Bucket, pos []byte) error {
	c := b.Bucket(operationsActiveBucket).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if err := b.Bucket(operationsVisitedBucket).Put(visitedKey(string(k[8:]), pos), nil); err != nil {
			return fmt.Errorf("partition: bulk: %w", err)
		}
	}
	return nil
}

// bulkFilter is the part of a listing request an operation filters by.
func bulkFilter(f *rpc.ListInvocations) *rpc.ListInvocations {
	return &rpc.ListInvocations{
		Status:              f.GetStatus(),
		Service:             f.GetService(),
		Handler:             f.GetHandler(),
		IdempotencyKey:      f.GetIdempotencyKey(),
		Key:                 f.GetKey(),
		CreatedAfterUnixMs:  f.GetCreatedAfterUnixMs(),
		CreatedBeforeUnixMs: f.GetCreatedBeforeUnixMs(),
	}
}

// bulkStep walks the next chunk of the oldest running operation.
func (m *machine) bulkStep(b *bolt.Bucket, c *rpc.BulkStep, fx *effects) error {
	k, _ := b.Bucket(operationsActiveBucket).Cursor().First()
	if k == nil {
		return nil
	}
	op, found, err := getOperation(b, string(k[8:]))
	if err != nil || !found {
		if err == nil {
			err = fmt.Errorf("partition: running operation %q has no state", k[8:])
		}
		return err
	}
	m.at, m.bound = c.ProposedAtUnixMs, op.LogIndex+1
	if err := m.walk(b, op, fx); err != nil {
		return err
	}
	if !op.Done {
		fx.bulkActive = true
		return nil
	}
	if err := b.Bucket(operationsActiveBucket).Delete(k); err != nil {
		return fmt.Errorf("partition: bulk: %w", err)
	}
	// Marks of records touched, then purged, before the walk reached them.
	vb := b.Bucket(operationsVisitedBucket)
	prefix := visitedKey(op.Id, nil)
	var marks [][]byte
	vc := vb.Cursor()
	for mk, _ := vc.Seek(prefix); mk != nil && bytes.HasPrefix(mk, prefix); mk, _ = vc.Next() {
		marks = append(marks, bytes.Clone(mk))
	}
	for _, mk := range marks {
		if err := vb.Delete(mk); err != nil {
			return fmt.Errorf("partition: bulk: %w", err)
		}
	}
	next, _ := b.Bucket(operationsActiveBucket).Cursor().First()
	fx.bulkActive = next != nil
	return nil
}

// walk applies op to the next op.Chunk listing entries after its cursor
// and stores op.
func (m *machine) walk(b *bolt.Bucket, op *rpc.Operation, fx *effects) error {
	cur := b.Bucket(createdBucket).Cursor()
	var k []byte
	if len(op.Cursor) == 0 {
		k, _ = cur.First()
	} else if k, _ = cur.Seek(op.Cursor); bytes.Equal(k, op.Cursor) {
		k, _ = cur.Next()
	}
	// Collected first: the actions change the index (purge) under a cursor.
	var keys [][]byte
	for ; k != nil && bytes.Compare(k, op.LastPosition) <= 0 && len(keys) < int(op.Chunk); k, _ = cur.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	vb := b.Bucket(operationsVisitedBucket)
	for _, pos := range keys {
		op.Scanned++
		op.Cursor = pos
		if vk := visitedKey(op.Id, pos); vb.Get(vk) != nil {
			if err := vb.Delete(vk); err != nil {
				return fmt.Errorf("partition: bulk: %w", err)
			}
			continue
		}
		rec, found, err := m.record(b, pos[8:])
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		// Older operations act first (none while steps walk the oldest,
		// but a record may have been created ahead of them).
		saved := m.bound
		m.bound = op.LogIndex
		rec, found, err = m.touch(b, rec, fx)
		m.bound = saved
		if err != nil || !found {
			if err != nil {
				return err
			}
			continue
		}
		applied, err := m.act(b, op, rec, fx)
		if err != nil {
			return err
		}
		if applied {
			op.Applied++
		}
	}
	if len(keys) < int(op.Chunk) || bytes.Equal(op.Cursor, op.LastPosition) {
		op.Done, op.FinishedAtUnixMs = true, m.at
	}
	return putOperation(b, op)
}

// touched looks id's record up for a command stamped at and lets every
// running operation act on it first (touch).
func (m *machine) touched(b *bolt.Bucket, id []byte, at int64, fx *effects) (*rpc.InvocationRecord, bool, error) {
	m.at, m.bound = at, math.MaxUint64
	rec, found, err := m.record(b, id)
	if err != nil || !found {
		return rec, found, err
	}
	return m.touch(b, rec, fx)
}

// touch lets each running operation whose Bulk is below m.bound, in log
// order, act on rec if its walk has not reached it and it matched at the
// Bulk's position (its state then is its state now: anything that changed
// it since touched it first), and marks it visited. It returns rec as it
// is afterwards, found false once purged.
func (m *machine) touch(b *bolt.Bucket, rec *rpc.InvocationRecord, fx *effects) (*rpc.InvocationRecord, bool, error) {
	ab := b.Bucket(operationsActiveBucket)
	c := ab.Cursor()
	k, _ := c.First()
	if k == nil {
		return rec, true, nil // the common case: one seek in an empty bucket
	}
	var ids []string
	for ; k != nil && binary.BigEndian.Uint64(k) < m.bound; k, _ = c.Next() {
		ids = append(ids, string(k[8:]))
	}
	pos := positionOf(rec)
	for _, id := range ids {
		op, found, err := getOperation(b, id)
		if err != nil || !found {
			return nil, false, err
		}
		if !ahead(op, rec, pos) {
			continue
		}
		vk := visitedKey(op.Id, pos)
		if b.Bucket(operationsVisitedBucket).Get(vk) != nil {
			continue
		}
		if err := b.Bucket(operationsVisitedBucket).Put(vk, nil); err != nil {
			return nil, false, fmt.Errorf("partition: bulk: %w", err)
		}
		saved := m.bound
		m.bound = op.LogIndex + 1 // what its action changes, it touches itself
		applied, err := m.act(b, op, rec, fx)
		m.bound = saved
		if err != nil {
			return nil, false, err
		}
		if applied {
			op.Applied++
			if err := putOperation(b, op); err != nil {
				return nil, false, err
			}
		}
		if op.Action == rpc.BulkAction_BULK_PURGE && applied {
			return nil, false, nil
		}
	}
	return rec, true, nil
}

// ahead reports whether op's walk has yet to reach rec (at listing
// position pos); one created after op's Bulk is marked visited already
// (markNew).
func ahead(op *rpc.Operation, rec *rpc.InvocationRecord, pos []byte) bool {
	return (len(op.Cursor) == 0 || bytes.Compare(pos, op.Cursor) > 0) &&
		bytes.Compare(pos, op.LastPosition) <= 0
}

// purgedByRetention counts a record a retention Purge drops as applied by
// a running bulk purge that would have dropped it.
func (m *machine) purgedByRetention(b *bolt.Bucket, id []byte) error {
	if k, _ := b.Bucket(operationsActiveBucket).Cursor().First(); k == nil {
		return nil
	}
	rec, found, err := m.record(b, id)
	if err != nil || !found {
		return err
	}
	pos := positionOf(rec)
	c := b.Bucket(operationsActiveBucket).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		op, found, err := getOperation(b, string(k[8:]))
		if err != nil || !found {
			return err
		}
		if op.Action != rpc.BulkAction_BULK_PURGE || !ahead(op, rec, pos) {
			continue
		}
		vk := visitedKey(op.Id, pos)
		if b.Bucket(operationsVisitedBucket).Get(vk) != nil {
			continue
		}
		ok, err := filterMatches(b, rec, op.Filter)
		if err != nil || !ok {
			return err
		}
		op.Applied++
		if err := b.Bucket(operationsVisitedBucket).Put(vk, nil); err != nil {
			return fmt.Errorf("partition: bulk: %w", err)
		}
		if err := putOperation(b, op); err != nil {
			return err
		}
		return nil // purged once: no later operation finds it
	}
	return nil
}

// act applies op's action to rec if rec matches op's filter and the
// action applies to its state; it reports whether it did.
func (m *machine) act(b *bolt.Bucket, op *rpc.Operation, rec *rpc.InvocationRecord, fx *effects) (bool, error) {
	if ok, err := filterMatches(b, rec, op.Filter); err != nil || !ok {
		return false, err
	}
	switch op.Action {
	case rpc.BulkAction_BULK_CANCEL:
		return m.endRecord(b, rec, cancelledError, false, m.at, fx)
	case rpc.BulkAction_BULK_KILL:
		return m.endRecord(b, rec, killedError, false, m.at, fx)
	case rpc.BulkAction_BULK_PAUSE:
		return m.pauseRecord(b, rec, dueOf(rec), fx)
	case rpc.BulkAction_BULK_RESUME:
		return m.resumeRecord(b, rec, "", m.at, fx)
	case rpc.BulkAction_BULK_PURGE:
		return m.purgeRecord(b, rec)
	}
	return false, nil
}

// applicable reports whether action would change rec at time at.
func applicable(action rpc.BulkAction, rec *rpc.InvocationRecord, at int64) bool {
	switch action {
	case rpc.BulkAction_BULK_CANCEL, rpc.BulkAction_BULK_KILL:
		return rec.State != rpc.InvocationRecord_COMPLETED
	case rpc.BulkAction_BULK_PAUSE:
		return rec.State == rpc.InvocationRecord_PENDING
	case rpc.BulkAction_BULK_RESUME:
		return rec.State == rpc.InvocationRecord_PAUSED ||
			(rec.State == rpc.InvocationRecord_PENDING && rec.Attempts > 0 && rec.RetryAtUnixMs > at)
	case rpc.BulkAction_BULK_PURGE:
		return rec.State == rpc.InvocationRecord_COMPLETED
	}
	return false
}

// filterMatches applies a bulk filter to rec from replicated state only:
// running (a leader's view) counts as pending.
func filterMatches(b *bolt.Bucket, rec *rpc.InvocationRecord, f *rpc.ListInvocations) (bool, error) {
	inv := rec.Invoke
	switch {
	case f.GetService() != "" && inv.GetService() != f.GetService(),
		f.GetHandler() != "" && inv.GetHandler() != f.GetHandler(),
		f.GetIdempotencyKey() != "" && inv.GetIdempotencyKey() != f.GetIdempotencyKey(),
		f.GetKey() != "" && inv.GetKey() != f.GetKey(),
		f.GetCreatedAfterUnixMs() > 0 && rec.AcceptedAtUnixMs < f.GetCreatedAfterUnixMs(),
		f.GetCreatedBeforeUnixMs() > 0 && rec.AcceptedAtUnixMs >= f.GetCreatedBeforeUnixMs():
		return false, nil
	}
	var want rpc.InvocationRecord_State
	switch f.GetStatus() {
	case rpc.ListInvocations_ANY:
		return true, nil
	case rpc.ListInvocations_PENDING, rpc.ListInvocations_RUNNING:
		want = rpc.InvocationRecord_PENDING
	case rpc.ListInvocations_QUEUED:
		want = rpc.InvocationRecord_QUEUED
	case rpc.ListInvocations_SCHEDULED:
		want = rpc.InvocationRecord_SCHEDULED
	case rpc.ListInvocations_PAUSED:
		want = rpc.InvocationRecord_PAUSED
	case rpc.ListInvocations_COMPLETED:
		want = rpc.InvocationRecord_COMPLETED
	case rpc.ListInvocations_FAILED:
		if rec.State != rpc.InvocationRecord_COMPLETED {
			return false, nil
		}
		res, found, err := results.Get(b, rec.CompletedAtUnixMs, inv.InvocationId)
		return found && res.GetResult().GetFailed(), err
	}
	return rec.State == want, nil
}

// countAhead counts the records op's walk has yet to reach that its
// action would change at time at (read-only: dry runs and progress).
func countAhead(b *bolt.Bucket, op *rpc.Operation, at int64) (uint64, error) {
	if op.Done || len(op.LastPosition) == 0 {
		return 0, nil
	}
	cur := b.Bucket(createdBucket).Cursor()
	var k []byte
	if len(op.Cursor) == 0 {
		k, _ = cur.First()
	} else if k, _ = cur.Seek(op.Cursor); bytes.Equal(k, op.Cursor) {
		k, _ = cur.Next()
	}
	vb := b.Bucket(operationsVisitedBucket)
	var n uint64
	for ; k != nil && bytes.Compare(k, op.LastPosition) <= 0; k, _ = cur.Next() {
		if vb != nil && vb.Get(visitedKey(op.Id, k)) != nil {
			continue
		}
		rec, found, err := getRecord(b, k[8:])
		if err != nil {
			return 0, err
		}
		if !found || !applicable(op.Action, rec, at) {
			continue
		}
		ok, err := filterMatches(b, rec, op.Filter)
		if err != nil {
			return 0, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// readOperation reads operation id. Its matched count is applied plus,
// with countMatched, the invocations its walk has yet to reach that it
// will change (a scan of them, so only when the operation starts); without,
// applied once done and 0 before.
func readOperation(b *bolt.Bucket, id string, at int64, countMatched bool) (*rpc.Operation, error) {
	if b.Bucket(operationsBucket) == nil {
		return nil, rpc.ErrNotFound
	}
	op, found, err := getOperation(b, id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, rpc.ErrNotFound
	}
	switch {
	case op.Done:
		op.Matched = op.Applied
	case countMatched:
		ahead, err := countAhead(b, op, at)
		if err != nil {
			return nil, err
		}
		op.Matched = op.Applied + ahead
	}
	return op, nil
}

// dryRun counts what a Bulk of action and filter applied now would change.
func dryRun(b *bolt.Bucket, action rpc.BulkAction, filter *rpc.ListInvocations, at int64) (*rpc.Operation, error) {
	op := &rpc.Operation{Action: action, Filter: bulkFilter(filter)}
	if idx := b.Bucket(createdBucket); idx != nil {
		last, _ := idx.Cursor().Last()
		op.LastPosition = bytes.Clone(last)
	}
	n, err := countAhead(b, op, at)
	if err != nil {
		return nil, err
	}
	op.Matched, op.Done = n, true
	return op, nil
}
