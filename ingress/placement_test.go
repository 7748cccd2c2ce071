package ingress

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/raftgate/raftgate/invocation"
)

// TestUnkeyedInvocationsGoToLocalPartitions: an invocation whose partition
// is free to choose goes to a partition this node leads, and follows the
// leadership as it changes, the led partitions taking turns of LocalTurn
// invocations; an idempotency key or an object key still decides the
// partition; with no partition led here (or only the metadata group), ids
// spread over every partition.
func TestUnkeyedInvocationsGoToLocalPartitions(t *testing.T) {
	var led atomic.Pointer[[]uint32]
	lead := func(ps ...uint32) { led.Store(&ps) }
	lead(0, 3)
	const turn = 10
	h, fd := newTestHandler(t, func(c *Config) {
		keyedServices(c)
		c.LocalPartitions = func() []uint32 { return *led.Load() }
		c.LocalTurn = turn
	})
	fd.complete = echoResult
	partitionsOf := func(n int, method, path string, headers ...string) map[uint32]int {
		t.Helper()
		got := map[uint32]int{}
		for range n {
			w := do(h, method, path, `"x"`, append([]string{"Content-Type", "application/json"}, headers...)...)
			if w.Code != 200 && w.Code != 202 {
				t.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
			}
			a := fd.lastAppend(t)
			id := mustID(t, w)
			p := invocation.PartitionFor(id.PartitionKey(), 4)
			if a.partition != p {
				t.Fatalf("%s: appended to partition %d, id is in %d", path, a.partition, p)
			}
			got[p]++
		}
		return got
	}
	only := func(got map[uint32]int, want ...uint32) bool {
		for p := range got {
			if !slices.Contains(want, p) {
				return false
			}
		}
		return len(got) == len(want)
	}

	if got := partitionsOf(20, "POST", "/Greeter/greet/send"); !only(got, 3) {
		t.Fatalf("sends while leading 0 and 3 went to %v, want partition 3 only", got)
	}
	if got := partitionsOf(20, "POST", "/Greeter/greet"); !only(got, 3) {
		t.Fatalf("calls while leading 0 and 3 went to %v, want partition 3 only", got)
	}
	lead(1, 4)
	if got := partitionsOf(60, "POST", "/Greeter/greet/send"); !only(got, 1, 4) || got[1] != 30 || got[4] != 30 {
		t.Fatalf("sends while leading 1 and 4 went to %v, want 30 to each and nothing else", got)
	}
	// A turn's invocations fill one partition's entries: a turn that has
	// just begun goes on in the same partition.
	partitionsOf(1, "POST", "/Greeter/greet/send")
	if got := partitionsOf(turn-1, "POST", "/Greeter/greet/send"); len(got) != 1 {
		t.Fatalf("the rest of one turn of %d sends went to %v, want one partition", turn, got)
	}

	// The partition of an idempotency key or an object key is not ours to
	// choose: every node must find it again.
	keyed := partitionsOf(1, "POST", "/Greeter/greet/send", "Idempotency-Key", "k1")
	want := invocation.PartitionFor(invocation.Idempotent("Greeter", "greet", "k1").PartitionKey(), 4)
	if keyed[want] != 1 {
		t.Fatalf("idempotent send went to %v, want partition %d", keyed, want)
	}
	object := partitionsOf(1, "POST", "/Counter/c9/add")
	want = invocation.PartitionFor(invocation.KeyedPartitionKey("Counter", "c9"), 4)
	if object[want] != 1 {
		t.Fatalf("object call went to %v, want partition %d", object, want)
	}

	lead(0)
	if got := partitionsOf(200, "POST", "/Greeter/greet/send"); len(got) != 4 {
		t.Fatalf("with no partition led here, 200 sends reached partitions %v, want all four", got)
	}
}
