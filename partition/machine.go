package partition

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/results"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// invocationsBucket: recordKey(id) → marshalled rpc.InvocationRecord
// (without its result, which the results package stores under the record's
// completion time and id).
var invocationsBucket = []byte("invocations")

// How full bbolt fills a page of the partition's own buckets before it
// splits one (results and outbox set theirs). bbolt's default, half, suits
// keys that arrive in random order; a page left behind by a split of keys
// that arrive in order gets no more keys and stays half empty. The listing
// index is keyed by acceptance time. Records are keyed by time for ids
// minted here but by a hash for idempotent ids: three quarters is the
// compromise (docs/benchmarks.md, "State pages").
const (
	createdFill = 0.9
	recordsFill = 0.75
)

// Result of a cancelled invocation: 409 Conflict, as Restate reports a
// cancellation, with failed=true so callers see a terminal failure.
const (
	cancelledStatus = 409
	cancelledError  = "cancelled"
)

// reply is what a tracked request learns when its entry applies.
type reply struct {
	requestID []byte // the command's own bytes
	term      uint64 // term of the entry that produced the reply
	appended  *rpc.Appended
	err       error
}

// effects are what applying a run of entries hands to Acknowledge and
// Reveal. Apply only collects them; the processor acts on them when raftlog
// runs those (raftlog/api.go, Applied).
type effects struct {
	replies   []reply
	completed []*rpc.InvocationResult
	// outboxDone lists ids whose delivery was removed or rescheduled.
	outboxDone [][]byte
	// outboxAdded: a delivery was queued (or rescheduled); firstQueued is
	// the earliest due time among them, where the invoker's next scan
	// must read again.
	outboxAdded bool
	firstQueued int64
	outboxDelta int
	accepted    int // new invocations recorded
	// purgeFull: a Purge stopped at its limit, so more may have expired.
	purgeFull bool
	// pausedChanged: an invocation was paused or left PAUSED.
	pausedChanged bool
	// bulkActive: a bulk operation has chunks left (the leader proposes
	// the next step).
	bulkActive bool
	// schedulesChanged wakes the leader's scheduler; ticksSkipped counts
	// the ticks schedules skipped (schedules.go).
	schedulesChanged bool
	ticksSkipped     uint64
	// callbacksDone lists invocations whose callback attempt applied;
	// callbacksQueued: a callback was queued or rescheduled
	// (callbacks.go).
	callbacksDone    [][]byte
	callbacksQueued  bool
	callbackOutcomes [numCallbackOutcomes]int
	commands         int
	applied          [numCommandKinds]int // commands by kind, for metrics
	// started lists the Start marks applied (flow.go).
	started []startMark
	// adopted lists the shares adopted (shares.go).
	adopted []*rpc.AdoptShare
}

// queued notes a delivery queued due at due.
func (fx *effects) queued(due int64) {
	if !fx.outboxAdded || due < fx.firstQueued {
		fx.firstQueued = due
	}
	fx.outboxAdded = true
}

// commandKind numbers the command kinds, for the applied-commands metric.
type commandKind int

const (
	kindInvoke commandKind = iota
	kindComplete
	kindCancel
	kindPurge
	kindAttemptFailed
	kindAdmit
	kindFenceService
	kindResume
	kindRestart
	kindKill
	kindPurgeInvocation
	kindPause
	kindBulk
	kindBulkStep
	kindSchedule
	kindCallbackAttempt
	kindStart
	kindAdoptShare
	numCommandKinds
)

// commandKindNames are the metric's kind labels.
var commandKindNames = [numCommandKinds]string{"invoke", "complete", "cancel", "purge", "attempt_failed", "admit", "fence_service",
	"resume", "restart", "kill", "purge_invocation", "pause", "bulk", "bulk_step", "schedule", "callback_attempt", "start", "adopt_share"}

// machine is the deterministic part of the processor: a function of (state
// bucket, entries). It has no goroutine, clock, randomness or I/O besides
// its bucket. What it keeps past a call is a cache of what it stored in
// the bucket (records), never entry bytes.
type machine struct {
	records recordCache
	// lookup is a cursor on the invocations bucket for the Apply under
	// way (nil until a lookup needs it): its seeks reuse one search stack
	// where each Get would allocate its own.
	lookup *bolt.Cursor
	// index is the log index of the entry being applied (a Bulk's place
	// in the log), and at the time of the command being applied (both
	// inputs, like the entry's data): bulk actions that a command's
	// change of a record triggers first are stamped at.
	index uint64
	at    int64
	// bound: running bulk operations whose Bulk is below it act on a
	// record before a change (bulk.go, touch).
	bound uint64
}

func (m *machine) apply(b *bolt.Bucket, entries []raftlog.Entry) (*effects, error) {
	m.records.use(b)
	fx, err := m.applyEntries(b, entries)
	m.lookup = nil
	if err != nil {
		m.records.drop() // it may hold records of the commands the rollback undoes
	}
	return fx, err
}

// restored tells the machine its bucket was replaced (a snapshot install).
func (m *machine) restored() { m.records.drop() }

func (m *machine) applyEntries(b *bolt.Bucket, entries []raftlog.Entry) (*effects, error) {
	if err := initBuckets(b); err != nil {
		return nil, err
	}
	fx := &effects{}
	for _, e := range entries {
		batch, err := decodeBatch(e.Data)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", e.Index, err)
		}
		for i, c := range batch.Commands {
			if err := m.applyCommand(b, e.Term, e.Index, c, fx); err != nil {
				return nil, fmt.Errorf("entry %d command %d: %w", e.Index, i, err)
			}
		}
	}
	return fx, nil
}

// formatKey marks, in the state bucket, the record layout the state was
// written with. formatRecordKey: records under recordKey(id). State from
// before it (records under the raw id, no mark) is refused by
// checkFormat rather than misread: its records would not be found, and an
// idempotent request would run a second time.
var formatKey = []byte("format")

const formatRecordKey = "2"

// ErrStateFormat reports state written by an older raftgate whose layout
// this one cannot read.
var ErrStateFormat = errors.New("partition state written by an older raftgate (records keyed by raw invocation id); this version cannot read it: start the node with an empty data directory")

// checkFormat refuses state whose records were written with another
// layout; an empty state is fine (initBuckets marks it on first apply).
func checkFormat(b *bolt.Bucket) error {
	if f := b.Get(formatKey); f != nil {
		if string(f) != formatRecordKey {
			return fmt.Errorf("%w (format %q)", ErrStateFormat, f)
		}
		return nil
	}
	if inv := b.Bucket(invocationsBucket); inv != nil {
		if k, _ := inv.Cursor().First(); k != nil {
			return ErrStateFormat
		}
	}
	return nil
}

func initBuckets(b *bolt.Bucket) error {
	if b.Get(formatKey) == nil {
		if err := checkFormat(b); err != nil {
			return err
		}
		if err := b.Put(formatKey, []byte(formatRecordKey)); err != nil {
			return fmt.Errorf("partition: mark format: %w", err)
		}
	}
	// Every Apply runs this: look a bucket up first (bbolt caches it in a
	// write transaction), as CreateBucketIfNotExists copies its key; and
	// set the fill percents, which bbolt keeps per transaction.
	inv := b.Bucket(invocationsBucket)
	if inv == nil {
		var err error
		if inv, err = b.CreateBucketIfNotExists(invocationsBucket); err != nil {
			return fmt.Errorf("partition: create bucket: %w", err)
		}
	}
	inv.FillPercent = recordsFill
	if err := results.Init(b); err != nil {
		return err
	}
	if err := initKeyBuckets(b); err != nil {
		return err
	}
	if err := initListing(b); err != nil {
		return err
	}
	if err := initLifecycleBuckets(b); err != nil {
		return err
	}
	return outbox.Init(b)
}

func (m *machine) applyCommand(b *bolt.Bucket, term, index uint64, c *rpc.Command, fx *effects) error {
	fx.commands++
	m.index = index
	switch cmd := c.Cmd.(type) {
	case *rpc.Command_Invoke:
		fx.applied[kindInvoke]++
		return m.invoke(b, term, cmd.Invoke, fx)
	case *rpc.Command_Resume:
		fx.applied[kindResume]++
		return m.resume(b, term, cmd.Resume, fx)
	case *rpc.Command_Restart:
		fx.applied[kindRestart]++
		return m.restart(b, term, cmd.Restart, fx)
	case *rpc.Command_Kill:
		fx.applied[kindKill]++
		return m.kill(b, term, cmd.Kill, fx)
	case *rpc.Command_PurgeInvocation:
		fx.applied[kindPurgeInvocation]++
		return m.purgeInvocation(b, term, cmd.PurgeInvocation, fx)
	case *rpc.Command_Pause:
		fx.applied[kindPause]++
		return m.pause(b, cmd.Pause, fx)
	case *rpc.Command_Bulk:
		fx.applied[kindBulk]++
		return m.bulk(b, term, cmd.Bulk, fx)
	case *rpc.Command_BulkStep:
		fx.applied[kindBulkStep]++
		return m.bulkStep(b, cmd.BulkStep, fx)
	case *rpc.Command_Complete:
		fx.applied[kindComplete]++
		return m.complete(b, cmd.Complete, fx)
	case *rpc.Command_Cancel:
		fx.applied[kindCancel]++
		return m.cancel(b, term, cmd.Cancel, fx)
	case *rpc.Command_Purge:
		fx.applied[kindPurge]++
		return m.purge(b, cmd.Purge, fx)
	case *rpc.Command_AttemptFailed:
		fx.applied[kindAttemptFailed]++
		return m.attemptFailed(b, cmd.AttemptFailed, fx)
	case *rpc.Command_Admit:
		fx.applied[kindAdmit]++
		return m.admit(b, cmd.Admit, fx)
	case *rpc.Command_FenceService:
		fx.applied[kindFenceService]++
		return m.fence(b, term, cmd.FenceService, fx)
	case *rpc.Command_PutSchedule, *rpc.Command_DeleteSchedule, *rpc.Command_PauseSchedule,
		*rpc.Command_TriggerSchedule, *rpc.Command_ScheduleTick, *rpc.Command_BackfillSchedule, *rpc.Command_ScheduleDispatched:
		fx.applied[kindSchedule]++
		return m.applySchedule(b, term, c, fx)
	case *rpc.Command_CallbackAttempt:
		fx.applied[kindCallbackAttempt]++
		return m.callbackAttempt(b, cmd.CallbackAttempt, fx)
	case *rpc.Command_Start:
		fx.applied[kindStart]++
		return m.start(b, cmd.Start, fx)
	case *rpc.Command_AdoptShare:
		fx.applied[kindAdoptShare]++
		return m.adoptShare(b, cmd.AdoptShare, fx)
	default:
		return fmt.Errorf("partition: unexpected command %T", c.Cmd)
	}
}

// invoke records a new invocation and queues its delivery; an id that
// exists is a no-op reporting the existing invocation.
func (m *machine) invoke(b *bolt.Bucket, term uint64, c *rpc.Invoke, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term}
	if len(c.InvocationId) != invocation.IDLen || c.Service == "" || c.Handler == "" {
		r.err = fmt.Errorf("partition: malformed invoke: %w", rpc.ErrInvalid)
		fx.replies = append(fx.replies, r)
		return nil
	}
	rec, found, err := m.record(b, c.InvocationId)
	if err != nil {
		return err
	}
	if found && c.RejectReusedKey && c.IdempotencyKey != "" && !bytes.Equal(rec.Invoke.GetRequestId(), c.RequestId) && !sameRequest(rec, c) {
		r.err = fmt.Errorf("partition: idempotency key %q was used with another request body by invocation %s: %w",
			c.IdempotencyKey, idString(c.InvocationId), rpc.ErrKeyReused)
		fx.replies = append(fx.replies, r)
		return nil
	}
	if found {
		r.appended = &rpc.Appended{
			InvocationId: c.InvocationId,
			// A retry of the request that created it is not "previously
			// accepted": it is the same logical request.
			PreviouslyAccepted: !bytes.Equal(rec.Invoke.GetRequestId(), c.RequestId),
			NotBeforeUnixMs:    rec.Invoke.GetNotBeforeUnixMs(),
			CompletedAtUnixMs:  rec.CompletedAtUnixMs,
		}
		fx.replies = append(fx.replies, r)
		return nil
	}
	if fencedOut(b, c) {
		// Nothing is stored: the ingress looks the service up again and
		// retries with what it finds then.
		r.err = fmt.Errorf("partition: service %q: registration %d checked, changed at %d: %w",
			c.Service, c.ServiceRegisteredIndex, fenceOf(b, c.Service), rpc.ErrStaleRegistry)
		fx.replies = append(fx.replies, r)
		return nil
	}
	rec = &rpc.InvocationRecord{Invoke: c, State: rpc.InvocationRecord_PENDING, AcceptedAtUnixMs: c.ProposedAtUnixMs}
	switch {
	case delayedExclusive(c):
		rec.State = rpc.InvocationRecord_SCHEDULED // enters its key when due (keys.go)
		err = m.startDelivery(b, rec, fx)
	case c.Exclusive:
		err = m.enterKey(b, rec, fx)
	default:
		err = m.startDelivery(b, rec, fx)
	}
	if err != nil {
		return err
	}
	if err := indexCreated(b, rec); err != nil {
		return err
	}
	fx.accepted++
	r.appended = &rpc.Appended{InvocationId: c.InvocationId, NotBeforeUnixMs: c.NotBeforeUnixMs}
	fx.replies = append(fx.replies, r)
	return nil
}

// sameRequest reports whether c carries the request body rec was created
// with: by digest when the record's body was cut (completed, over
// RequestPreviewBytes), else byte for byte.
func sameRequest(rec *rpc.InvocationRecord, c *rpc.Invoke) bool {
	old := rec.Invoke
	if n := rec.RequestBodyBytes; n > 0 && int(n) != len(c.Body) {
		return false
	}
	if rec.RequestBodyBytes > uint32(len(old.Body)) {
		if len(old.BodyDigest) == 0 {
			// Cut before digests existed: what is kept matches.
			return bytes.HasPrefix(c.Body, old.Body)
		}
		sum := sha256.Sum256(c.Body)
		return bytes.Equal(sum[:], old.BodyDigest)
	}
	return bytes.Equal(old.Body, c.Body)
}

// complete records the result of a pending invocation and removes its
// delivery; completing a completed (or purged) invocation is a no-op, so
// the first Complete in log order wins.
func (m *machine) complete(b *bolt.Bucket, c *rpc.Complete, fx *effects) error {
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	if err != nil || !found || rec.State == rpc.InvocationRecord_COMPLETED {
		return err
	}
	return m.finish(b, rec, c.Result, c.ProposedAtUnixMs, fx)
}

func (m *machine) cancel(b *bolt.Bucket, term uint64, c *rpc.Cancel, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term}
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	switch {
	case err != nil:
		return err
	case !found:
		r.err = fmt.Errorf("partition: cancel: %w", rpc.ErrNotFound)
	default:
		if _, err := m.endRecord(b, rec, cancelledError, c.AttemptUnderWay, c.ProposedAtUnixMs, fx); err != nil {
			return err
		}
	}
	fx.replies = append(fx.replies, r)
	return nil
}

func (m *machine) finish(b *bolt.Bucket, rec *rpc.InvocationRecord, res *rpc.Result, at int64, fx *effects) error {
	id := rec.Invoke.InvocationId
	due := dueOf(rec)
	was := rec.State
	if was == rpc.InvocationRecord_PAUSED {
		if err := unindexPaused(b, rec); err != nil {
			return err
		}
		fx.pausedChanged = true
	}
	rec.State = rpc.InvocationRecord_COMPLETED
	rec.CompletedAtUnixMs = at
	rec.RetryAtUnixMs = 0
	keepRequestPreview(rec) // the rest is no longer needed; the result is what is kept
	if err := queueCallback(b, rec, at, fx); err != nil {
		return err
	}
	if err := m.storeRecord(b, rec); err != nil {
		return err
	}
	ir := &rpc.InvocationResult{InvocationId: id, Result: res, IdempotencyKey: rec.Invoke.IdempotencyKey, CompletedAtUnixMs: at}
	if err := results.Put(b, ir); err != nil {
		return err
	}
	removed, err := outbox.Remove(b, due, id)
	if err != nil {
		return err
	}
	if removed {
		fx.outboxDelta--
	}
	fx.outboxDone = append(fx.outboxDone, id)
	fx.completed = append(fx.completed, ir)
	if rec.Invoke.ScheduleId != "" {
		if err := m.scheduleRunDone(b, rec, at, fx); err != nil {
			return err
		}
	}
	if rec.Invoke.Exclusive {
		return m.leaveKey(b, rec, was, fx)
	}
	return nil
}

// startDelivery stores rec and puts its delivery in the outbox.
func (m *machine) startDelivery(b *bolt.Bucket, rec *rpc.InvocationRecord, fx *effects) error {
	if err := m.storeRecord(b, rec); err != nil {
		return err
	}
	due := dueOf(rec)
	if err := outbox.Put(b, outbox.Entry{ID: rec.Invoke.InvocationId, Due: due, Attempts: rec.Attempts, Service: rec.Invoke.Service}); err != nil {
		return err
	}
	fx.queued(due)
	fx.outboxDelta++
	return nil
}

// purge drops results completed before the command's time, at most its
// limit of them (all when 0, as Purge entries written before the limit
// existed applied), with their records; every replica drops the same ones
// at the same log position.
func (m *machine) purge(b *bolt.Bucket, c *rpc.Purge, fx *effects) error {
	inv := b.Bucket(invocationsBucket)
	n, err := results.Purge(b, c.BeforeUnixMs, int(c.Limit), func(id []byte) error {
		// A bulk purge that has not reached it yet counts it as its own.
		if err := m.purgedByRetention(b, id); err != nil {
			return err
		}
		if err := unindexCreated(b, id); err != nil {
			return err
		}
		if err := inv.Delete(recordKey(id)); err != nil {
			return fmt.Errorf("partition: purge: %w", err)
		}
		m.records.evict(id)
		return nil
	})
	if err != nil {
		return err
	}
	if c.Limit > 0 && n == int(c.Limit) {
		fx.purgeFull = true
	}
	return purgeOperations(b, c.BeforeUnixMs)
}

// attemptFailed records a failed delivery attempt and reschedules the
// delivery. An attempt number not above the recorded one is stale (an old
// leader's report of an attempt a new leader repeated) and ignored, as is
// any report for an invocation not being delivered (queued for its key).
func (m *machine) attemptFailed(b *bolt.Bucket, c *rpc.AttemptFailed, fx *effects) error {
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	if err != nil || !found || rec.State != rpc.InvocationRecord_PENDING || c.Attempt <= rec.Attempts {
		return err
	}
	oldDue := dueOf(rec)
	rec.Attempts = c.Attempt
	rec.LastError = c.Error
	rec.RetryAtUnixMs = c.RetryAtUnixMs
	if err := m.storeRecord(b, rec); err != nil {
		return err
	}
	due := dueOf(rec)
	moved, err := outbox.Move(b, oldDue, outbox.Entry{ID: c.InvocationId, Due: due, Attempts: c.Attempt, Service: rec.Invoke.Service})
	if err != nil {
		return err
	}
	fx.queued(due)
	if !moved {
		fx.outboxDelta++
	}
	fx.outboxDone = append(fx.outboxDone, c.InvocationId)
	return nil
}

// dueOf is when a pending invocation's delivery is due: its retry time
// after a failed attempt, else its not-before time, else when it was
// accepted. The outbox key is derived from it, so the outbox needs no index
// by id.
func dueOf(rec *rpc.InvocationRecord) int64 {
	if rec.Attempts > 0 {
		return rec.RetryAtUnixMs
	}
	return max(rec.Invoke.GetNotBeforeUnixMs(), rec.AcceptedAtUnixMs)
}

// recordKey orders records by the id bytes after the partition key: for
// ids from invocation.Random that is creation time, so new records append
// to the bucket's last page (the partition keys of one partition are random).
func recordKey(id []byte) []byte {
	if len(id) != invocation.IDLen {
		return id
	}
	return appendRecordKey(make([]byte, 0, invocation.IDLen), id)
}

// appendRecordKey appends recordKey(id) to b.
func appendRecordKey(b, id []byte) []byte {
	if len(id) != invocation.IDLen {
		return append(b, id...)
	}
	return append(append(b, id[8:]...), id[:8]...)
}

// record is getRecord through the machine's cache of the records it
// stored, and its lookup cursor.
func (m *machine) record(b *bolt.Bucket, id []byte) (*rpc.InvocationRecord, bool, error) {
	if rec := m.records.get(id); rec != nil {
		return rec, true, nil
	}
	if m.lookup == nil {
		m.lookup = b.Bucket(invocationsBucket).Cursor() // initBuckets created it
	}
	key := recordKey(id)
	if k, data := m.lookup.Seek(key); bytes.Equal(k, key) && data != nil {
		return decodeRecord(id, data)
	}
	return nil, false, nil
}

// storeRecord is putRecord, remembered by the machine's cache.
func (m *machine) storeRecord(b *bolt.Bucket, rec *rpc.InvocationRecord) error {
	if err := putRecord(b, rec); err != nil {
		return err
	}
	m.records.put(rec)
	return nil
}

func getRecord(b *bolt.Bucket, id []byte) (*rpc.InvocationRecord, bool, error) {
	inv := b.Bucket(invocationsBucket)
	if inv == nil {
		return nil, false, nil
	}
	data := inv.Get(recordKey(id))
	if data == nil {
		return nil, false, nil
	}
	return decodeRecord(id, data)
}

func decodeRecord(id, data []byte) (*rpc.InvocationRecord, bool, error) {
	rec := &rpc.InvocationRecord{}
	if err := proto.Unmarshal(data, rec); err != nil {
		return nil, false, fmt.Errorf("partition: record %x: %w", id, err)
	}
	return rec, true, nil
}

func putRecord(b *bolt.Bucket, rec *rpc.InvocationRecord) error {
	// Key and value in one allocation: bbolt copies the key, and keeps only
	// the value until the transaction commits.
	id := rec.Invoke.InvocationId
	kv := appendRecordKey(make([]byte, 0, len(id)+marshalOpts.Size(rec)), id)
	kv, err := sizedMarshalOpts.MarshalAppend(kv, rec)
	if err != nil {
		return fmt.Errorf("partition: marshal record: %w", err)
	}
	key, data := kv[:len(id):len(id)], kv[len(id):]
	if err := b.Bucket(invocationsBucket).Put(key, data); err != nil {
		return fmt.Errorf("partition: put record: %w", err)
	}
	return nil
}
