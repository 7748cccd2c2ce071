package partition

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// keyEvent is one thing an ordering service saw: a delivery starting, or
// ending with an answer (answered) or abandoned by its caller.
type keyEvent struct {
	id       string
	answered bool
	start    bool
}

// orderingService records the start and end of every delivery; while
// holdFirst is set, it holds deliveries of that id until released or
// abandoned.
type orderingService struct {
	srv *httptest.Server

	mu        sync.Mutex
	events    []keyEvent // guarded by mu
	keys      map[string]string
	holdFirst string
	release   chan struct{}
}

func newOrderingService(t *testing.T) *orderingService {
	s := &orderingService{keys: make(map[string]string), release: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(headerInvocationID)
		s.mu.Lock()
		s.events = append(s.events, keyEvent{id: id, start: true})
		s.keys[id] = r.Header.Get(headerKey)
		hold := id == s.holdFirst
		s.mu.Unlock()
		if hold {
			select {
			case <-s.release:
			case <-r.Context().Done():
				s.record(keyEvent{id: id})
				return
			}
		}
		s.record(keyEvent{id: id, answered: true})
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *orderingService) record(e keyEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

func (s *orderingService) starts(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.events {
		if e.id == id && e.start {
			n++
		}
	}
	return n
}

// The invoker delivers one exclusive invocation per key at a time, in
// order, with the key in x-raftgate-key; shared ones run alongside; a
// delayed one joins when due. A new leader redelivers the running one and
// starts the next only after its result is recorded.
func TestKeyedDeliveryOrderAcrossLeaderChange(t *testing.T) {
	svc := newOrderingService(t)
	services := staticServices{"Counter": {Name: "Counter", Url: svc.srv.URL, Kind: rpc.Service_OBJECT, Shared: []string{"get"}}}
	c := newFakeCluster(t, 3, func(_ int, cfg *Config) { cfg.Services = services })
	c.setLeader(0, false)

	var exclusive []invocation.ID
	appendKeyed := func(id invocation.ID, handler string, excl bool, delay time.Duration) invocation.ID {
		now := time.Now()
		inv := &rpc.Invoke{InvocationId: id[:], RequestId: invocation.NewRequestID(), Service: "Counter", Handler: handler,
			Key: "k", Exclusive: excl, ProposedAtUnixMs: now.UnixMilli()}
		if delay > 0 {
			inv.NotBeforeUnixMs = now.Add(delay).UnixMilli()
		}
		leader := c.replicas[c.leaderIndex()].p
		if _, err := leader.Append(ctxT(t), inv); err != nil {
			t.Fatal(err)
		}
		if excl {
			exclusive = append(exclusive, id)
		}
		return id
	}
	first := invocation.RandomKeyed("Counter", "k")
	svc.mu.Lock()
	svc.holdFirst = first.String()
	svc.mu.Unlock()
	appendKeyed(first, "add", true, 0)
	for range 4 {
		appendKeyed(invocation.RandomKeyed("Counter", "k"), "add", true, 0)
	}
	shared := appendKeyed(invocation.RandomKeyed("Counter", "k"), "get", false, 0)
	appendKeyed(invocation.RandomKeyed("Counter", "k"), "add", true, 20*time.Millisecond)

	// The shared one runs while the first holds the key; the others wait.
	awaitOutput(t, c.replicas[0].p, shared[:])
	testutil.WaitFor(t, 10*time.Second, "first delivery", func() bool { return svc.starts(first.String()) == 1 })
	rec, err := c.replicas[0].p.Status(ctxT(t), exclusive[2][:])
	if err != nil || rec.State != rpc.InvocationRecord_QUEUED || rec.QueuePosition != 1 {
		t.Fatalf("third invocation: %v %v, want queued at position 1", rec, err)
	}
	// The delayed one joins behind the others once due (Admit).
	testutil.WaitFor(t, 10*time.Second, "delayed one queued", func() bool {
		ks, err := c.replicas[0].p.KeyStatus(ctxT(t), "Counter", "k")
		return err == nil && ks.Queued == 5
	})

	// A new leader delivers the first again (the old attempt is abandoned)
	// and nothing else until it has a result.
	c.setLeader(1, true)
	testutil.WaitFor(t, 10*time.Second, "redelivery", func() bool { return svc.starts(first.String()) >= 2 })
	close(svc.release)
	for _, id := range exclusive {
		awaitOutput(t, c.replicas[1].p, id[:])
	}

	svc.mu.Lock()
	defer svc.mu.Unlock()
	// Each exclusive invocation starts only after the one before it was
	// answered, and in order.
	answered := map[string]bool{}
	next := 0
	for _, e := range svc.events {
		if e.answered {
			answered[e.id] = true
		}
		if !e.start || e.id == shared.String() {
			continue
		}
		i := indexOf(exclusive, e.id)
		if i < 0 {
			t.Fatalf("unexpected delivery %s", e.id)
		}
		if i > 0 && !answered[exclusive[i-1].String()] {
			t.Fatalf("invocation %d started before invocation %d was answered: %+v", i, i-1, svc.events)
		}
		if i > next {
			t.Fatalf("invocation %d started before invocation %d", i, next)
		}
		next = max(next, i+1)
	}
	if next != len(exclusive) {
		t.Fatalf("%d of %d exclusive invocations delivered", next, len(exclusive))
	}
	for id, key := range svc.keys {
		if key != "k" {
			t.Fatalf("%s: x-raftgate-key %q", id, key)
		}
	}
	ks, err := c.replicas[1].p.KeyStatus(ctxT(t), "Counter", "k")
	if err != nil || len(ks.Running) != 0 || ks.Queued != 0 {
		t.Fatalf("key after all completed: %v %v", ks, err)
	}
}

func indexOf(ids []invocation.ID, s string) int {
	for i, id := range ids {
		if id.String() == s {
			return i
		}
	}
	return -1
}

func (c *fakeCluster) leaderIndex() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// An invocation of a key must carry its key's partition key, or it would
// queue in a partition where the key's other invocations are not; an
// exclusive one needs a key.
func TestKeyedInvokeNeedsItsKeysPartitionKey(t *testing.T) {
	c := newFakeCluster(t, 1, nil)
	c.setLeader(0, false)
	id := invocation.Random()
	inv := &rpc.Invoke{InvocationId: id[:], RequestId: invocation.NewRequestID(), Service: "Counter", Handler: "add", Key: "k", Exclusive: true}
	if _, err := c.replicas[0].p.Append(ctxT(t), inv); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("append = %v, want ErrInvalid", err)
	}
	inv.Key = ""
	if _, err := c.replicas[0].p.Append(ctxT(t), inv); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("exclusive without key: append = %v, want ErrInvalid", err)
	}
}
