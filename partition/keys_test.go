package partition

import (
	"fmt"
	"slices"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// keyMachine applies commands one entry each to a machine over a real
// bbolt file, and reads back what the key-queue rules decided.
type keyMachine struct {
	t     *testing.T
	db    *bolt.DB
	m     machine
	index uint64
	now   int64
	names map[string]string // id bytes → test name
}

func newKeyMachine(t *testing.T) *keyMachine {
	db := scratchDB(t)
	return &keyMachine{t: t, db: db, now: 1000, names: make(map[string]string)}
}

func (k *keyMachine) apply(cmds ...*rpc.Command) *effects {
	k.t.Helper()
	data, err := rpc.EncodeBatch(cmds...)
	if err != nil {
		k.t.Fatal(err)
	}
	k.index++
	var fx *effects
	if err := k.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(stateBucket)
		if err != nil {
			return err
		}
		fx, err = k.m.apply(b, []raftlog.Entry{{Index: k.index, Term: 1, Data: data}})
		return err
	}); err != nil {
		k.t.Fatal(err)
	}
	return fx
}

// invoke applies an Invoke of handler of Counter/key; exclusive unless
// shared; delay > 0 makes it a delayed send due delay ms after now.
func (k *keyMachine) invoke(name, key string, exclusive bool, delay int64) []byte {
	k.t.Helper()
	k.now++
	id := invocation.RandomKeyed("Counter", key)
	k.names[string(id[:])] = name
	inv := &rpc.Invoke{InvocationId: id[:], RequestId: []byte(name), Service: "Counter", Handler: "add",
		Key: key, Exclusive: exclusive, ProposedAtUnixMs: k.now}
	if delay > 0 {
		inv.NotBeforeUnixMs = k.now + delay
	}
	k.apply(invokeCmd(inv))
	return id[:]
}

func (k *keyMachine) complete(id []byte) {
	k.t.Helper()
	k.now++
	k.apply(completeCmd(&rpc.Complete{InvocationId: id, Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: k.now}))
}

func (k *keyMachine) cancel(id []byte) {
	k.t.Helper()
	k.now++
	k.apply(cancelCmd(&rpc.Cancel{InvocationId: id, RequestId: []byte("c"), ProposedAtUnixMs: k.now}))
}

func (k *keyMachine) admit(id []byte) {
	k.t.Helper()
	k.now++
	k.apply(admitCmd(&rpc.Admit{InvocationId: id, ProposedAtUnixMs: k.now}))
}

// outbox lists the names of the queued deliveries in outbox order.
func (k *keyMachine) outbox() []string {
	k.t.Helper()
	var out []string
	k.view(func(b *bolt.Bucket) error {
		return outbox.Scan(b, func(e outbox.Entry) bool {
			out = append(out, k.names[string(e.ID)])
			return true
		})
	})
	return out
}

// state describes an invocation: "pending", "completed", "scheduled" or
// "queued N" (N ahead of it).
func (k *keyMachine) state(id []byte) string {
	k.t.Helper()
	var s string
	k.view(func(b *bolt.Bucket) error {
		rec, found, err := getRecord(b, id)
		switch {
		case err != nil:
			return err
		case !found:
			s = "gone"
		case rec.State == rpc.InvocationRecord_QUEUED:
			s = fmt.Sprintf("queued %d", queuePosition(b, rec))
		default:
			s = map[rpc.InvocationRecord_State]string{rpc.InvocationRecord_PENDING: "pending",
				rpc.InvocationRecord_COMPLETED: "completed", rpc.InvocationRecord_SCHEDULED: "scheduled"}[rec.State]
		}
		return nil
	})
	return s
}

// key describes a key: "running NAME, N queued" or "free".
func (k *keyMachine) key(key string) string {
	k.t.Helper()
	var s string
	k.view(func(b *bolt.Bucket) error {
		ks, err := readKeyStatus(b, "Counter", key)
		if err != nil {
			return err
		}
		if len(ks.Running) == 0 && ks.Queued == 0 {
			s = "free"
		} else {
			s = fmt.Sprintf("running %s, %d queued", k.names[string(ks.Running)], ks.Queued)
		}
		return err
	})
	return s
}

func (k *keyMachine) view(fn func(b *bolt.Bucket) error) {
	k.t.Helper()
	if err := k.db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(stateBucket)) }); err != nil {
		k.t.Fatal(err)
	}
}

func expect(t *testing.T, what string, got, want any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// Exclusive invocations of one key run one at a time in log order; the
// outbox holds only the running one; keys are independent.
func TestKeyQueueFIFO(t *testing.T) {
	k := newKeyMachine(t)
	a := k.invoke("a", "x", true, 0)
	b := k.invoke("b", "x", true, 0)
	k.invoke("o", "y", true, 0)
	c := k.invoke("c", "x", true, 0)
	expect(t, "outbox", k.outbox(), []string{"a", "o"})
	expect(t, "b", k.state(b), "queued 0")
	expect(t, "c", k.state(c), "queued 1")
	expect(t, "key x", k.key("x"), "running a, 2 queued")
	k.complete(a)
	expect(t, "outbox after a", k.outbox(), []string{"b", "o"}) // b is due since it was accepted
	expect(t, "b", k.state(b), "pending")
	expect(t, "c", k.state(c), "queued 0")
	k.complete(a) // a second Complete changes nothing
	expect(t, "key x", k.key("x"), "running b, 1 queued")
	k.complete(b)
	k.complete(c)
	expect(t, "key x", k.key("x"), "free")
	expect(t, "key y", k.key("y"), "running o, 0 queued")
	expect(t, "outbox", k.outbox(), []string{"o"})
	// A free key starts again from scratch.
	d := k.invoke("d", "x", true, 0)
	expect(t, "d", k.state(d), "pending")
}

// Shared handlers are delivered at once and neither wait for nor hold
// the key.
func TestKeyQueueSharedBypass(t *testing.T) {
	k := newKeyMachine(t)
	a := k.invoke("a", "x", true, 0)
	s := k.invoke("s", "x", false, 0)
	b := k.invoke("b", "x", true, 0)
	expect(t, "outbox", k.outbox(), []string{"a", "s"})
	expect(t, "key", k.key("x"), "running a, 1 queued")
	k.complete(s)
	expect(t, "b after shared completed", k.state(b), "queued 0")
	k.complete(a)
	expect(t, "outbox", k.outbox(), []string{"b"})
}

// A delayed send waits outside the queue and enters it when its Admit
// applies, behind whatever entered before; a second Admit is a no-op.
func TestKeyQueueDelayedJoinsWhenDue(t *testing.T) {
	k := newKeyMachine(t)
	a := k.invoke("a", "x", true, 0)
	d := k.invoke("d", "x", true, 500)
	b := k.invoke("b", "x", true, 0)
	expect(t, "d", k.state(d), "scheduled")
	expect(t, "outbox", k.outbox(), []string{"a", "d"}) // d at its due time
	expect(t, "b", k.state(b), "queued 0")
	k.admit(d)
	expect(t, "d admitted", k.state(d), "queued 1")
	expect(t, "outbox", k.outbox(), []string{"a"})
	k.admit(d)
	expect(t, "key", k.key("x"), "running a, 2 queued")
	k.complete(a)
	k.complete(b)
	expect(t, "outbox", k.outbox(), []string{"d"})

	// On a free key an admitted send starts at once; cancelling a scheduled
	// one never touches the key.
	e := k.invoke("e", "y", true, 500)
	f := k.invoke("f", "z", true, 500)
	k.admit(e)
	expect(t, "e", k.state(e), "pending")
	expect(t, "key y", k.key("y"), "running e, 0 queued")
	k.cancel(f)
	expect(t, "key z", k.key("z"), "free")
	expect(t, "outbox", k.outbox(), []string{"d", "e"})
	k.admit(f)
	expect(t, "f after admit of cancelled", k.state(f), "completed")
}

// Cancelling a queued invocation removes it; cancelling the running one
// completes it and hands the key on.
func TestKeyQueueCancel(t *testing.T) {
	k := newKeyMachine(t)
	a := k.invoke("a", "x", true, 0)
	b := k.invoke("b", "x", true, 0)
	c := k.invoke("c", "x", true, 0)
	d := k.invoke("d", "x", true, 0)
	k.cancel(b)
	expect(t, "b", k.state(b), "completed")
	expect(t, "c", k.state(c), "queued 0")
	expect(t, "key", k.key("x"), "running a, 2 queued")
	k.cancel(a)
	expect(t, "outbox", k.outbox(), []string{"c"})
	expect(t, "d", k.state(d), "queued 0")
	// Stale reports about a queued invocation change nothing.
	k.apply(attemptFailedCmd(&rpc.AttemptFailed{InvocationId: d, Attempt: 1, RetryAtUnixMs: 1}))
	expect(t, "outbox", k.outbox(), []string{"c"})
	expect(t, "d", k.state(d), "queued 0")
	k.cancel(c)
	k.cancel(d)
	expect(t, "key", k.key("x"), "free")
	expect(t, "outbox", k.outbox(), []string(nil))
}

// Purge drops completed invocations of a key without touching its queue;
// a workflow id whose run was purged can run again.
func TestKeyQueuePurge(t *testing.T) {
	k := newKeyMachine(t)
	a := k.invoke("a", "x", true, 0)
	b := k.invoke("b", "x", true, 0)
	c := k.invoke("c", "x", true, 0)
	k.complete(a)
	k.now += 100
	k.apply(purgeCmd(&rpc.Purge{BeforeUnixMs: k.now}))
	expect(t, "a", k.state(a), "gone")
	expect(t, "b", k.state(b), "pending")
	expect(t, "c", k.state(c), "queued 0")
	k.complete(b)
	expect(t, "outbox", k.outbox(), []string{"c"})

	run := invocation.WorkflowRun("Signup", "alice")
	inv := func(req string) *rpc.Invoke {
		k.now++
		return &rpc.Invoke{InvocationId: run[:], RequestId: []byte(req), Service: "Signup", Handler: "run",
			Key: "alice", Exclusive: true, ProposedAtUnixMs: k.now}
	}
	if fx := k.apply(invokeCmd(inv("r1"))); fx.replies[0].appended.PreviouslyAccepted {
		t.Fatal("first run reported as previously accepted")
	}
	if fx := k.apply(invokeCmd(inv("r2"))); !fx.replies[0].appended.PreviouslyAccepted {
		t.Fatal("second run not reported as previously accepted")
	}
	k.complete(run[:])
	if fx := k.apply(invokeCmd(inv("r3"))); !fx.replies[0].appended.PreviouslyAccepted {
		t.Fatal("run after completion not reported as previously accepted")
	}
	k.now += 100
	k.apply(purgeCmd(&rpc.Purge{BeforeUnixMs: k.now}))
	if fx := k.apply(invokeCmd(inv("r4"))); fx.replies[0].appended.PreviouslyAccepted {
		t.Fatal("run after purge reported as previously accepted")
	}
}

// Replicas applying a keyed log in different transaction sizes store the
// same bytes.
func TestKeyQueueReplicasIdentical(t *testing.T) {
	var entries []raftlog.Entry
	add := func(cmds ...*rpc.Command) {
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, raftlog.Entry{Index: uint64(len(entries) + 1), Term: 1, Data: data})
	}
	var ids [][]byte
	for i := range 30 {
		key := fmt.Sprint("k", i%3)
		id := invocation.RandomKeyed("Counter", key)
		inv := &rpc.Invoke{InvocationId: id[:], RequestId: []byte{byte(i)}, Service: "Counter", Handler: "add",
			Key: key, Exclusive: i%4 != 0, ProposedAtUnixMs: int64(1000 + i)}
		if i%5 == 0 {
			inv.NotBeforeUnixMs = int64(2000 + i)
		}
		add(invokeCmd(inv))
		ids = append(ids, id[:])
	}
	for i, id := range slices.Backward(ids) {
		switch i % 3 {
		case 0:
			add(completeCmd(&rpc.Complete{InvocationId: id, Result: &rpc.Result{Status: 200}, ProposedAtUnixMs: int64(3000 + i)}))
		case 1:
			add(admitCmd(&rpc.Admit{InvocationId: id, ProposedAtUnixMs: int64(3000 + i)}))
		case 2:
			add(cancelCmd(&rpc.Cancel{InvocationId: id, RequestId: []byte("c"), ProposedAtUnixMs: int64(3000 + i)}))
		}
	}
	add(purgeCmd(&rpc.Purge{BeforeUnixMs: 3015}))
	if a, b := applyAll(t, entries, 1).dump(t), applyAll(t, entries, 8).dump(t); a != b {
		t.Fatalf("replicas differ:\n%s\n---\n%s", a, b)
	}
}
