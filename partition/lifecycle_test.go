package partition

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// lifecycleLog builds a log entry by entry and remembers which entry
// carries the request id whose reply a test checks.
type lifecycleLog struct {
	t       *testing.T
	entries []raftlog.Entry
}

func (l *lifecycleLog) add(cmds ...*rpc.Command) {
	data, err := rpc.EncodeBatch(cmds...)
	if err != nil {
		l.t.Fatal(err)
	}
	l.entries = append(l.entries, raftlog.Entry{Index: uint64(len(l.entries) + 1), Term: 1, Data: data})
}

// run applies the log, chunk entries per transaction, and returns the
// state and each request id's reply error.
func (l *lifecycleLog) run(chunk int) (*replica, map[string]error) {
	l.t.Helper()
	db := scratchDB(l.t)
	var m machine
	replies := map[string]error{}
	for i := 0; i < len(l.entries); i += chunk {
		batch := l.entries[i:min(i+chunk, len(l.entries))]
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(stateBucket)
			if err != nil {
				return err
			}
			fx, err := m.apply(b, batch)
			if err != nil {
				return err
			}
			for _, r := range fx.replies {
				replies[string(r.requestID)] = r.err
			}
			return nil
		}); err != nil {
			l.t.Fatal(err)
		}
	}
	return &replica{db: db}, replies
}

// sameEverywhere runs the log one entry per transaction and in chunks of
// three: both replicas must store the same bytes (Apply is deterministic).
func (l *lifecycleLog) sameEverywhere() (*replica, map[string]error) {
	l.t.Helper()
	one, replies := l.run(1)
	three, _ := l.run(3)
	if a, b := one.dump(l.t), three.dump(l.t); a != b {
		l.t.Fatalf("replicas differ:\n%s\n---\n%s", a, b)
	}
	return one, replies
}

func stamped(service string, n int, at int64) *rpc.Invoke {
	inv := newInvoke(service, n)
	inv.ProposedAtUnixMs = at
	return inv
}

func recordOf(t *testing.T, r *replica, id []byte) (*rpc.InvocationRecord, *rpc.InvocationResult) {
	t.Helper()
	var rec *rpc.InvocationRecord
	var res *rpc.InvocationResult
	if err := r.View(context.Background(), func(b *bolt.Bucket) error {
		var err error
		rec, res, err = readInvocation(b, id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return rec, res
}

func queuedAt(t *testing.T, r *replica, id []byte) (int64, bool) {
	t.Helper()
	var due int64
	var found bool
	_ = r.View(context.Background(), func(b *bolt.Bucket) error {
		return outbox.Scan(b, func(e outbox.Entry) bool {
			if string(e.ID) == string(id) {
				due, found = e.Due, true
				return false
			}
			return true
		})
	})
	return due, found
}

// Each per-invocation action, as the state machine applies it: pause on
// exhausted attempts, resume to another URL, kill, purge, restart, and
// the refusals of actions that do not apply to the state.
func TestLifecycleCommands(t *testing.T) {
	l := &lifecycleLog{t: t}
	a, bInv, c, d, e := stamped("s", 0, 1000), stamped("s", 1, 1001), stamped("s", 2, 1002), stamped("s", 3, 1003), stamped("s", 4, 1004)
	l.add(invokeCmd(a), invokeCmd(bInv), invokeCmd(c), invokeCmd(d), invokeCmd(e))
	// a: attempt 1 failed, attempt 2 exhausted the policy: paused; a stale
	// pause of attempt 1 is ignored.
	l.add(attemptFailedCmd(&rpc.AttemptFailed{InvocationId: a.InvocationId, Attempt: 1, Error: "503", RetryAtUnixMs: 1500, ProposedAtUnixMs: 1100}))
	l.add(&rpc.Command{Cmd: &rpc.Command_Pause{Pause: &rpc.Pause{InvocationId: a.InvocationId, Attempt: 2, Error: "paused after 2 attempts: 503", ProposedAtUnixMs: 1600}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_Pause{Pause: &rpc.Pause{InvocationId: a.InvocationId, Attempt: 1, Error: "stale", ProposedAtUnixMs: 1601}}})
	pausedState, _ := l.sameEverywhere()
	rec, _ := recordOf(t, pausedState, a.InvocationId)
	if rec.State != rpc.InvocationRecord_PAUSED || rec.Attempts != 2 || rec.LastError != "paused after 2 attempts: 503" {
		t.Fatalf("after pause: %v", rec)
	}
	if _, queued := queuedAt(t, pausedState, a.InvocationId); queued {
		t.Fatal("a paused invocation is still in the outbox")
	}
	_ = pausedState.View(context.Background(), func(b *bolt.Bucket) error {
		if n := countPaused(b); n["s"] != 1 || len(n) != 1 {
			t.Errorf("paused per service = %v, want s:1", n)
		}
		return nil
	})

	req := func(s string) []byte { return []byte(s) }
	l.add(&rpc.Command{Cmd: &rpc.Command_Resume{Resume: &rpc.Resume{InvocationId: a.InvocationId, RequestId: req("resume-a"), ProposedAtUnixMs: 5000, Url: "http://127.0.0.1:1/new"}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_Resume{Resume: &rpc.Resume{InvocationId: d.InvocationId, RequestId: req("resume-d"), ProposedAtUnixMs: 5001}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_Kill{Kill: &rpc.Kill{InvocationId: bInv.InvocationId, RequestId: req("kill-b"), ProposedAtUnixMs: 5002}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_Kill{Kill: &rpc.Kill{InvocationId: bInv.InvocationId, RequestId: req("kill-b-again"), ProposedAtUnixMs: 5003}}})
	l.add(completeCmd(&rpc.Complete{InvocationId: c.InvocationId, Result: &rpc.Result{Status: 200, Body: []byte("c")}, ProposedAtUnixMs: 5004}))
	l.add(&rpc.Command{Cmd: &rpc.Command_PurgeInvocation{PurgeInvocation: &rpc.PurgeInvocation{InvocationId: c.InvocationId, RequestId: req("purge-c"), ProposedAtUnixMs: 5005}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_PurgeInvocation{PurgeInvocation: &rpc.PurgeInvocation{InvocationId: d.InvocationId, RequestId: req("purge-d"), ProposedAtUnixMs: 5006}}})
	l.add(completeCmd(&rpc.Complete{InvocationId: e.InvocationId, Result: &rpc.Result{Status: 500, Failed: true}, ProposedAtUnixMs: 5007}))
	newID := invocation.Random().Bytes()
	copy(newID[:8], e.InvocationId[:8])
	l.add(&rpc.Command{Cmd: &rpc.Command_Restart{Restart: &rpc.Restart{InvocationId: e.InvocationId, RequestId: req("restart-e"), ProposedAtUnixMs: 5008, NewInvocationId: newID}}})
	other := invocation.Random().Bytes()
	l.add(&rpc.Command{Cmd: &rpc.Command_Restart{Restart: &rpc.Restart{InvocationId: e.InvocationId, RequestId: req("restart-e-again"), ProposedAtUnixMs: 5009, NewInvocationId: other}}})
	// Retries of a request whose first answer was lost: the same answer.
	l.add(&rpc.Command{Cmd: &rpc.Command_Restart{Restart: &rpc.Restart{InvocationId: e.InvocationId, RequestId: req("restart-e"), ProposedAtUnixMs: 5010, NewInvocationId: other}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_Kill{Kill: &rpc.Kill{InvocationId: bInv.InvocationId, RequestId: req("kill-b-retry"), ProposedAtUnixMs: 5011}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_Resume{Resume: &rpc.Resume{InvocationId: a.InvocationId, RequestId: req("resume-a-retry"), ProposedAtUnixMs: 5012}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_Kill{Kill: &rpc.Kill{InvocationId: c.InvocationId, RequestId: req("kill-purged"), ProposedAtUnixMs: 5013}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_Kill{Kill: &rpc.Kill{InvocationId: e.InvocationId, RequestId: req("kill-e"), ProposedAtUnixMs: 5014}}})
	state, replies := l.sameEverywhere()

	wantReply := map[string]error{
		"resume-a": nil, "resume-d": rpc.ErrConflict, "kill-b": nil, "kill-b-again": nil, "kill-e": rpc.ErrConflict,
		"purge-c": nil, "purge-d": rpc.ErrConflict, "restart-e": nil, "restart-e-again": rpc.ErrConflict,
		"kill-b-retry": nil, "resume-a-retry": nil, "kill-purged": rpc.ErrNotFound,
	}
	for id, want := range wantReply {
		got, ok := replies[id]
		if !ok || (want == nil) != (got == nil) || (want != nil && !errors.Is(got, want)) {
			t.Errorf("reply to %s = %v (present %v), want %v", id, got, ok, want)
		}
	}
	rec, _ = recordOf(t, state, a.InvocationId)
	if rec.State != rpc.InvocationRecord_PENDING || rec.ResumedAfterAttempts != 2 || rec.Url != "http://127.0.0.1:1/new" || rec.RetryAtUnixMs != 5000 {
		t.Fatalf("after resume: %v", rec)
	}
	if due, queued := queuedAt(t, state, a.InvocationId); !queued || due != 5000 {
		t.Fatalf("resumed invocation queued %v at %d, want at 5000", queued, due)
	}
	if _, res := recordOf(t, state, bInv.InvocationId); res == nil || res.Result.Error != killedError || res.Result.Status != 409 || !res.Result.Failed {
		t.Fatalf("killed result %v", res)
	}
	if rec, _ := recordOf(t, state, c.InvocationId); rec != nil {
		t.Fatalf("purged invocation still recorded: %v", rec)
	}
	if rec, _ := recordOf(t, state, d.InvocationId); rec == nil || rec.State != rpc.InvocationRecord_PENDING {
		t.Fatalf("invocation d (refused actions) = %v", rec)
	}
	old, _ := recordOf(t, state, e.InvocationId)
	nrec, _ := recordOf(t, state, newID)
	switch {
	case string(old.RestartedAs) != string(newID):
		t.Fatalf("original links to %x, want %x", old.RestartedAs, newID)
	case nrec == nil || nrec.State != rpc.InvocationRecord_PENDING || string(nrec.RestartedFrom) != string(e.InvocationId):
		t.Fatalf("restarted invocation %v", nrec)
	case string(nrec.Invoke.Body) != string(e.Body) || nrec.Invoke.Handler != e.Handler || nrec.AcceptedAtUnixMs != 5008:
		t.Fatalf("restarted invocation's input %v", nrec.Invoke)
	}
	_ = state.View(context.Background(), func(b *bolt.Bucket) error {
		if n := countPaused(b); len(n) != 0 {
			t.Errorf("paused per service = %v after resume, want none", n)
		}
		return nil
	})
}

// A bulk cancel applies to exactly the invocations that matched its
// filter at its log position, whatever happens between its chunks: an
// invocation created after it is left alone, and one completed before the
// walk reached it was cancelled first (the Complete then is a no-op).
func TestBulkAppliesToTheSetMatchingAtItsPosition(t *testing.T) {
	l := &lifecycleLog{t: t}
	var as, bs [][]byte
	for i := range 20 {
		svc := "a"
		if i%2 == 1 {
			svc = "b"
		}
		inv := stamped(svc, i, int64(1000+i))
		l.add(invokeCmd(inv))
		if svc == "a" {
			as = append(as, inv.InvocationId)
		} else {
			bs = append(bs, inv.InvocationId)
		}
	}
	// a[0] completed before the bulk: it does not match status=pending.
	l.add(completeCmd(&rpc.Complete{InvocationId: as[0], Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: 1900}))
	// In the same entry as the bulk, after it, with an older timestamp:
	// created after the bulk's position, so left alone.
	late := stamped("a", 99, 1005)
	l.add(&rpc.Command{Cmd: &rpc.Command_Bulk{Bulk: &rpc.Bulk{OperationId: "op_1", RequestId: []byte("bulk-1"), Action: rpc.BulkAction_BULK_CANCEL,
		Filter: &rpc.ListInvocations{Service: "a", Status: rpc.ListInvocations_PENDING}, ProposedAtUnixMs: 2000, Chunk: 3}}}, invokeCmd(late))
	later := stamped("a", 98, 1006) // a later entry
	l.add(invokeCmd(later))
	// The newest a completes before the walk reaches it.
	l.add(completeCmd(&rpc.Complete{InvocationId: as[9], Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: 2001}))
	// A second operation, newer: pause every b.
	l.add(&rpc.Command{Cmd: &rpc.Command_Bulk{Bulk: &rpc.Bulk{OperationId: "op_2", RequestId: []byte("bulk-2"), Action: rpc.BulkAction_BULK_PAUSE,
		Filter: &rpc.ListInvocations{Service: "b"}, ProposedAtUnixMs: 2002, Chunk: 4}}})
	for i := range 30 {
		l.add(&rpc.Command{Cmd: &rpc.Command_BulkStep{BulkStep: &rpc.BulkStep{OperationId: "op_1", ProposedAtUnixMs: int64(3000 + i)}}})
	}
	state, replies := l.sameEverywhere()
	if err := replies["bulk-1"]; err != nil {
		t.Fatal(err)
	}
	ops := map[string]*rpc.Operation{}
	_ = state.View(context.Background(), func(b *bolt.Bucket) error {
		for _, id := range []string{"op_1", "op_2"} {
			op, err := readOperation(b, id, 9999, true)
			if err != nil {
				return err
			}
			ops[id] = op
		}
		return nil
	})
	if op := ops["op_1"]; !op.Done || op.Applied != 9 || op.Matched != 9 {
		t.Fatalf("op_1 = %v, want done, 9 applied", op)
	}
	if op := ops["op_2"]; !op.Done || op.Applied != 10 {
		t.Fatalf("op_2 = %v, want done, 10 applied", op)
	}
	for i, id := range as {
		_, res := recordOf(t, state, id)
		want := cancelledError
		if i == 0 {
			want = ""
		}
		if res == nil || res.Result.Error != want {
			t.Errorf("a[%d] result %v, want error %q", i, res, want)
		}
	}
	for _, inv := range []*rpc.Invoke{late, later} {
		if rec, _ := recordOf(t, state, inv.InvocationId); rec.State != rpc.InvocationRecord_PENDING {
			t.Errorf("invocation created after the bulk is %v", rec.State)
		}
	}
	for i, id := range bs {
		if rec, _ := recordOf(t, state, id); rec.State != rpc.InvocationRecord_PAUSED {
			t.Errorf("b[%d] is %v, want paused", i, rec.State)
		}
	}
	// A dry run of resuming the b's counts them; the resume then applies.
	_ = state.View(context.Background(), func(b *bolt.Bucket) error {
		op, err := dryRun(b, rpc.BulkAction_BULK_RESUME, &rpc.ListInvocations{Status: rpc.ListInvocations_PAUSED}, 9999)
		if err != nil || op.Matched != 10 {
			t.Errorf("dry run = %v, %v; want 10", op, err)
		}
		return nil
	})
}

// Purge and resume by bulk, and a bulk purge that a retention Purge
// overtakes counts what it would have purged once.
func TestBulkPurgeAndResume(t *testing.T) {
	l := &lifecycleLog{t: t}
	var ids [][]byte
	for i := range 6 {
		inv := stamped("s", i, int64(1000+i))
		ids = append(ids, inv.InvocationId)
		l.add(invokeCmd(inv))
		l.add(completeCmd(&rpc.Complete{InvocationId: inv.InvocationId, Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: int64(2000 + i)}))
	}
	l.add(&rpc.Command{Cmd: &rpc.Command_Bulk{Bulk: &rpc.Bulk{OperationId: "op_p", RequestId: []byte("p"), Action: rpc.BulkAction_BULK_PURGE,
		Filter: &rpc.ListInvocations{Status: rpc.ListInvocations_COMPLETED}, ProposedAtUnixMs: 3000, Chunk: 2}}})
	l.add(&rpc.Command{Cmd: &rpc.Command_BulkStep{BulkStep: &rpc.BulkStep{ProposedAtUnixMs: 3001}}})
	// Retention drops the oldest four; two of them the walk had not reached.
	l.add(purgeCmd(&rpc.Purge{BeforeUnixMs: 2004, Limit: 10, ProposedAtUnixMs: 3002}))
	for i := range 5 {
		l.add(&rpc.Command{Cmd: &rpc.Command_BulkStep{BulkStep: &rpc.BulkStep{ProposedAtUnixMs: int64(3003 + i)}}})
	}
	state, _ := l.sameEverywhere()
	_ = state.View(context.Background(), func(b *bolt.Bucket) error {
		op, err := readOperation(b, "op_p", 9999, false)
		if err != nil || !op.Done || op.Applied != 6 {
			t.Errorf("op_p = %v, %v; want done, 6 applied", op, err)
		}
		if k, _ := b.Bucket(operationsVisitedBucket).Cursor().First(); k != nil {
			t.Errorf("visited marks left: %x", k)
		}
		return nil
	})
	for i, id := range ids {
		if rec, _ := recordOf(t, state, id); rec != nil {
			t.Errorf("invocation %d not purged", i)
		}
	}
}

// An unknown or repeated operation id, and a bulk on an empty partition.
func TestBulkEdges(t *testing.T) {
	l := &lifecycleLog{t: t}
	bulk := func(id, req string) *rpc.Command {
		return &rpc.Command{Cmd: &rpc.Command_Bulk{Bulk: &rpc.Bulk{OperationId: id, RequestId: []byte(req), Action: rpc.BulkAction_BULK_KILL, ProposedAtUnixMs: 1}}}
	}
	l.add(bulk("op_e", "1"))
	l.add(bulk("op_e", "2"))
	l.add(bulk("", "3"))
	before, _ := l.run(1)
	l.add(purgeCmd(&rpc.Purge{BeforeUnixMs: 2, Limit: 10, ProposedAtUnixMs: 3})) // retention drops finished operations
	state, replies := l.sameEverywhere()
	_ = before.View(context.Background(), func(b *bolt.Bucket) error {
		if op, err := readOperation(b, "op_e", 1, false); err != nil || !op.Done || op.Applied != 0 {
			t.Errorf("bulk on an empty partition = %v, %v", op, err)
		}
		return nil
	})
	if replies["1"] != nil || replies["2"] != nil || !errors.Is(replies["3"], rpc.ErrInvalid) {
		t.Fatalf("replies %v", replies)
	}
	_ = state.View(context.Background(), func(b *bolt.Bucket) error {
		if _, err := readOperation(b, "op_e", 1, false); !errors.Is(err, rpc.ErrNotFound) {
			t.Errorf("operation past retention: %v", err)
		}
		if _, err := readOperation(b, "op_x", 1, false); !errors.Is(err, rpc.ErrNotFound) {
			t.Errorf("unknown operation: %v", err)
		}
		return nil
	})
}

// An idempotency key reused with another body is refused when the request
// asks for it (rpc.ErrKeyReused, nothing stored), and answered with the
// first invocation otherwise, also once the first one completed and kept
// only a preview of a large body (then compared by digest).
func TestReusedIdempotencyKey(t *testing.T) {
	l := &lifecycleLog{t: t}
	big := make([]byte, RequestPreviewBytes+10)
	first := func(body []byte, req string) *rpc.Invoke {
		inv := stamped("s", 0, 1000)
		inv.InvocationId = invocation.Idempotent("s", "greet", "K").Bytes()
		inv.IdempotencyKey, inv.Body, inv.RequestId = "K", body, []byte(req)
		return inv
	}
	// Through stampedInvokeCmd, as the leader proposes (it stamps the digest).
	l.add(stampedInvokeCmd(first(big, "r1"), 1000))
	reuse := func(body []byte, req string, reject bool) *rpc.Command {
		inv := first(body, req)
		inv.RejectReusedKey = reject
		return stampedInvokeCmd(inv, 1001)
	}
	other := append(bytes.Clone(big[:len(big)-1]), 1)
	l.add(reuse(other, "pending-other", true), reuse(big, "pending-same", true), reuse(other, "pending-answer", false))
	l.add(completeCmd(&rpc.Complete{InvocationId: invocation.Idempotent("s", "greet", "K").Bytes(), Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: 2000}))
	l.add(reuse(other, "done-other", true), reuse(big, "done-same", true), reuse(big[:10], "done-shorter", true))
	state, replies := l.sameEverywhere()
	for req, want := range map[string]error{"pending-other": rpc.ErrKeyReused, "pending-same": nil, "pending-answer": nil,
		"done-other": rpc.ErrKeyReused, "done-same": nil, "done-shorter": rpc.ErrKeyReused} {
		if got := replies[req]; (want == nil) != (got == nil) || (want != nil && !errors.Is(got, want)) {
			t.Errorf("%s: %v, want %v", req, got, want)
		}
	}
	rec, _ := recordOf(t, state, invocation.Idempotent("s", "greet", "K").Bytes())
	if len(rec.Invoke.Body) != RequestPreviewBytes || len(rec.Invoke.BodyDigest) != 32 {
		t.Fatalf("completed record keeps %d bytes and a %d-byte digest", len(rec.Invoke.Body), len(rec.Invoke.BodyDigest))
	}
}
