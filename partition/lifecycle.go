package partition

import (
	"bytes"
	"fmt"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/results"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// Invocation lifecycle: what operators do to invocations that did not go
// well, each a command so every replica agrees (docs/operations.md, "When
// invocations fail").
//
//   - Pause takes a PENDING invocation out of the outbox (PAUSED); the
//     invoker proposes it when a retry policy with onMaxAttempts pause is
//     exhausted. An exclusive one keeps its key: the key's queue waits.
//
//   - Resume puts a PAUSED invocation, or a PENDING one backing off, in
//     the outbox due now, with a fresh attempt budget, optionally with
//     another URL.
//
//   - Restart records a new invocation with a COMPLETED or PAUSED one's
//     input, linked both ways; a paused original completes as killed.
//
//   - Kill completes any invocation not completed with a killed result.
//
//   - PurgeInvocation drops a COMPLETED invocation's record and result.
//
//     paused  service ‖ 0 ‖ id → nil   (the paused invocations, for the metric)
var pausedBucket = []byte("paused")

// Result of a killed invocation: 409 with failed=true, as a cancellation,
// told apart by its error.
const killedError = "killed"

func initLifecycleBuckets(b *bolt.Bucket) error {
	for _, name := range [][]byte{pausedBucket, operationsBucket, operationsActiveBucket, operationsVisitedBucket} {
		if b.Bucket(name) != nil {
			continue
		}
		if _, err := b.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("partition: create bucket %s: %w", name, err)
		}
	}
	return nil
}

func pausedKey(rec *rpc.InvocationRecord) []byte {
	k := append([]byte(rec.Invoke.Service), 0)
	return append(k, rec.Invoke.InvocationId...)
}

func unindexPaused(b *bolt.Bucket, rec *rpc.InvocationRecord) error {
	if err := b.Bucket(pausedBucket).Delete(pausedKey(rec)); err != nil {
		return fmt.Errorf("partition: unindex paused: %w", err)
	}
	return nil
}

// countPaused counts the paused invocations per service.
func countPaused(b *bolt.Bucket) map[string]int {
	out := map[string]int{}
	pb := b.Bucket(pausedBucket)
	if pb == nil {
		return out
	}
	c := pb.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if i := bytes.IndexByte(k, 0); i >= 0 {
			out[string(k[:i])]++
		}
	}
	return out
}

// errNotApplicable says why an action does not apply to rec's state.
func errNotApplicable(action string, rec *rpc.InvocationRecord, want string) error {
	return fmt.Errorf("partition: %s: the invocation is %s, %s: %w", action, stateWord(rec.State), want, rpc.ErrConflict)
}

func stateWord(s rpc.InvocationRecord_State) string {
	switch s {
	case rpc.InvocationRecord_PENDING:
		return "pending"
	case rpc.InvocationRecord_COMPLETED:
		return "completed"
	case rpc.InvocationRecord_QUEUED:
		return "queued"
	case rpc.InvocationRecord_SCHEDULED:
		return "scheduled"
	case rpc.InvocationRecord_PAUSED:
		return "paused"
	default:
		return s.String()
	}
}

// pauseRecord takes a PENDING rec out of the outbox; false for any other
// state.
func (m *machine) pauseRecord(b *bolt.Bucket, rec *rpc.InvocationRecord, oldDue int64, fx *effects) (bool, error) {
	if rec.State != rpc.InvocationRecord_PENDING {
		return false, nil
	}
	id := rec.Invoke.InvocationId
	removed, err := outbox.Remove(b, oldDue, id)
	if err != nil {
		return false, err
	}
	if removed {
		fx.outboxDelta--
	}
	fx.outboxDone = append(fx.outboxDone, id)
	rec.State = rpc.InvocationRecord_PAUSED
	rec.RetryAtUnixMs = 0
	if err := b.Bucket(pausedBucket).Put(pausedKey(rec), nil); err != nil {
		return false, fmt.Errorf("partition: index paused: %w", err)
	}
	fx.pausedChanged = true
	return true, m.storeRecord(b, rec)
}

// pause applies the invoker's Pause of an exhausted invocation (attempt >
// 0, ignored unless above the recorded attempts, as AttemptFailed), or an
// operator's (attempt 0).
func (m *machine) pause(b *bolt.Bucket, c *rpc.Pause, fx *effects) error {
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	if err != nil || !found || rec.State != rpc.InvocationRecord_PENDING || (c.Attempt > 0 && c.Attempt <= rec.Attempts) {
		return err
	}
	oldDue := dueOf(rec)
	if c.Attempt > 0 {
		rec.Attempts = c.Attempt
		rec.LastError = c.Error
	}
	_, err = m.pauseRecord(b, rec, oldDue, fx)
	return err
}

// resumeRecord delivers a PAUSED rec, or a PENDING one backing off at time
// at, now; false for any other state.
func (m *machine) resumeRecord(b *bolt.Bucket, rec *rpc.InvocationRecord, url string, at int64, fx *effects) (bool, error) {
	id := rec.Invoke.InvocationId
	switch {
	case rec.State == rpc.InvocationRecord_PAUSED:
		if err := unindexPaused(b, rec); err != nil {
			return false, err
		}
		fx.pausedChanged = true
	case rec.State == rpc.InvocationRecord_PENDING && rec.Attempts > 0 && rec.RetryAtUnixMs > at:
		removed, err := outbox.Remove(b, dueOf(rec), id)
		if err != nil {
			return false, err
		}
		if removed {
			fx.outboxDelta--
		}
		fx.outboxDone = append(fx.outboxDone, id)
	default:
		return false, nil
	}
	rec.State = rpc.InvocationRecord_PENDING
	rec.ResumedAfterAttempts = rec.Attempts
	if rec.Attempts > 0 {
		rec.RetryAtUnixMs = at
	}
	if url != "" {
		rec.Url = url
	}
	return true, m.startDelivery(b, rec, fx)
}

func (m *machine) resume(b *bolt.Bucket, term uint64, c *rpc.Resume, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term}
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	switch {
	case err != nil:
		return err
	case !found:
		r.err = fmt.Errorf("partition: resume: %w", rpc.ErrNotFound)
	default:
		ok, err := m.resumeRecord(b, rec, c.Url, c.ProposedAtUnixMs, fx)
		if err != nil {
			return err
		}
		// Resumed and no attempt failed since: a retry of this resume
		// (the first answer was lost with a leader) is answered alike.
		again := rec.State == rpc.InvocationRecord_PENDING && rec.Attempts > 0 && rec.Attempts == rec.ResumedAfterAttempts
		if !ok && !again {
			r.err = errNotApplicable("resume", rec, "only a paused invocation, or a pending one waiting to retry, resumes")
		}
	}
	fx.replies = append(fx.replies, r)
	return nil
}

// endRecord completes a rec not yet completed as cancelled or killed
// (reason); false when it had completed.
func (m *machine) endRecord(b *bolt.Bucket, rec *rpc.InvocationRecord, reason string, attemptUnderWay bool, at int64, fx *effects) (bool, error) {
	if rec.State == rpc.InvocationRecord_COMPLETED {
		return false, nil
	}
	attempts := rec.Attempts
	if attemptUnderWay {
		attempts++ // delivered, and now ended
	}
	res := &rpc.Result{Status: cancelledStatus, Failed: true, Error: reason, Attempts: attempts}
	return true, m.finish(b, rec, res, at, fx)
}

func (m *machine) kill(b *bolt.Bucket, term uint64, c *rpc.Kill, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term}
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	switch {
	case err != nil:
		return err
	case !found:
		r.err = fmt.Errorf("partition: kill: %w", rpc.ErrNotFound)
	default:
		ok, err := m.endRecord(b, rec, killedError, false, c.ProposedAtUnixMs, fx)
		if err != nil {
			return err
		}
		if !ok {
			// Killed already (a retry whose first answer was lost with a
			// leader, or another operator's) is no conflict.
			res, _, err := results.Get(b, rec.CompletedAtUnixMs, c.InvocationId)
			if err != nil {
				return err
			}
			if res.GetResult().GetError() != killedError {
				r.err = errNotApplicable("kill", rec, "nothing to kill")
			}
		}
	}
	fx.replies = append(fx.replies, r)
	return nil
}

// purgeRecord drops a COMPLETED rec, its result and its listing entry;
// false for any other state.
func (m *machine) purgeRecord(b *bolt.Bucket, rec *rpc.InvocationRecord) (bool, error) {
	if rec.State != rpc.InvocationRecord_COMPLETED {
		return false, nil
	}
	id := rec.Invoke.InvocationId
	if err := results.Delete(b, rec.CompletedAtUnixMs, id); err != nil {
		return false, err
	}
	if err := b.Bucket(createdBucket).Delete(positionOf(rec)); err != nil {
		return false, fmt.Errorf("partition: purge: %w", err)
	}
	if err := b.Bucket(invocationsBucket).Delete(recordKey(id)); err != nil {
		return false, fmt.Errorf("partition: purge: %w", err)
	}
	m.records.evict(id)
	return true, nil
}

func (m *machine) purgeInvocation(b *bolt.Bucket, term uint64, c *rpc.PurgeInvocation, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term}
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	switch {
	case err != nil:
		return err
	case !found:
		r.err = fmt.Errorf("partition: purge: %w", rpc.ErrNotFound)
	default:
		ok, err := m.purgeRecord(b, rec)
		if err != nil {
			return err
		}
		if !ok {
			r.err = errNotApplicable("purge", rec, "only a completed invocation is purged (cancel or kill it first)")
		}
	}
	fx.replies = append(fx.replies, r)
	return nil
}

// restart records a new invocation, c.NewInvocationId, with the input of
// a COMPLETED or PAUSED one, and links them; a paused original completes as
// killed. Refused for a workflow's run (it runs once per workflow id) and
// for a completed invocation whose request body was not kept whole.
func (m *machine) restart(b *bolt.Bucket, term uint64, c *rpc.Restart, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term}
	defer func() { fx.replies = append(fx.replies, r) }()
	if len(c.NewInvocationId) != invocation.IDLen || bytes.Equal(c.NewInvocationId, c.InvocationId) {
		r.err = fmt.Errorf("partition: restart: malformed new id: %w", rpc.ErrInvalid)
		return nil
	}
	rec, found, err := m.touched(b, c.InvocationId, c.ProposedAtUnixMs, fx)
	if err != nil {
		return err
	}
	if !found {
		r.err = fmt.Errorf("partition: restart: %w", rpc.ErrNotFound)
		return nil
	}
	old := rec.Invoke
	switch {
	case rec.State != rpc.InvocationRecord_COMPLETED && rec.State != rpc.InvocationRecord_PAUSED:
		r.err = errNotApplicable("restart", rec, "only a completed or paused invocation restarts")
		return nil
	case len(rec.RestartedAs) > 0:
		// A retry of this restart (its first answer lost with a leader)
		// answers the invocation it created.
		if nrec, found, err := m.record(b, rec.RestartedAs); err != nil || (found && bytes.Equal(nrec.Invoke.RequestId, c.RequestId)) {
			r.appended = &rpc.Appended{InvocationId: rec.RestartedAs}
			return err
		}
		r.err = fmt.Errorf("partition: restart: already restarted as %s: %w", idString(rec.RestartedAs), rpc.ErrConflict)
		return nil
	case old.Key != "" && bytes.Equal(old.InvocationId, invocation.WorkflowRun(old.Service, old.Key).Bytes()):
		r.err = fmt.Errorf("partition: restart: a workflow's run runs once per workflow id: purge it, then run the workflow again: %w", rpc.ErrConflict)
		return nil
	case rec.RequestBodyBytes > uint32(len(old.Body)):
		r.err = fmt.Errorf("partition: restart: only the first %d of the request's %d bytes were kept once it completed: %w",
			len(old.Body), rec.RequestBodyBytes, rpc.ErrConflict)
		return nil
	}
	if _, exists, err := m.record(b, c.NewInvocationId); err != nil || exists {
		if exists {
			r.err = fmt.Errorf("partition: restart: new id exists: %w", rpc.ErrInvalid)
		}
		return err
	}
	// A new invocation of the same input: no idempotency key (that key's
	// id is the original's) and no delay.
	inv := &rpc.Invoke{
		InvocationId:     c.NewInvocationId,
		RequestId:        c.RequestId,
		Service:          old.Service,
		Handler:          old.Handler,
		Body:             old.Body,
		ContentType:      old.ContentType,
		Headers:          old.Headers,
		Key:              old.Key,
		Exclusive:        old.Exclusive,
		ProposedAtUnixMs: c.ProposedAtUnixMs,
	}
	if rec.State == rpc.InvocationRecord_PAUSED {
		rec.RestartedAs = c.NewInvocationId
		if _, err := m.endRecord(b, rec, killedError+": restarted as "+idString(c.NewInvocationId), false, c.ProposedAtUnixMs, fx); err != nil {
			return err
		}
	} else {
		rec.RestartedAs = c.NewInvocationId
		if err := m.storeRecord(b, rec); err != nil {
			return err
		}
	}
	nrec := &rpc.InvocationRecord{Invoke: inv, State: rpc.InvocationRecord_PENDING, AcceptedAtUnixMs: c.ProposedAtUnixMs,
		RestartedFrom: c.InvocationId, Url: rec.Url}
	if inv.Exclusive {
		err = m.enterKey(b, nrec, fx)
	} else {
		err = m.startDelivery(b, nrec, fx)
	}
	if err != nil {
		return err
	}
	if err := indexCreated(b, nrec); err != nil {
		return err
	}
	fx.accepted++
	r.appended = &rpc.Appended{InvocationId: c.NewInvocationId}
	return nil
}
