package proposals

import (
	"errors"
	"testing"

	"github.com/raftgate/raftgate/rpc"
)

// received returns the reply waiting on tk, failing if there is none.
func received[R any](t *testing.T, tk Ticket[R]) Reply[R] {
	t.Helper()
	select {
	case r := <-tk.C:
		return r
	default:
		t.Fatal("no reply")
		return Reply[R]{}
	}
}

func noReply[R any](t *testing.T, tk Ticket[R], what string) {
	t.Helper()
	select {
	case r := <-tk.C:
		t.Fatalf("%s: got %+v", what, r)
	default:
	}
}

func leader(term uint64) *Tracker[string] {
	tr := NewTracker[string](10)
	tr.SetLeadership(1, term, true)
	return tr
}

func TestRepliesOnlyToSameTerm(t *testing.T) {
	tr := leader(5)
	tk, propose, err := tr.Register("req")
	if err != nil || !propose {
		t.Fatalf("Register = %v, %v", propose, err)
	}
	// An entry of an older term carrying the same request applies before
	// Propose returned, then Propose reports term 5.
	tr.Resolve([]byte("req"), 3, Reply[string]{Value: "old"})
	tr.Proposed([]Ticket[string]{tk}, 5)
	noReply(t, tk, "waiter of term 5 answered by a term-3 entry")
	tr.Resolve([]byte("req"), 6, Reply[string]{Value: "new"})
	noReply(t, tk, "waiter of term 5 answered by a term-6 entry")
	tr.Resolve([]byte("req"), 5, Reply[string]{Value: "mine"})
	if r := received(t, tk); r.Value != "mine" || r.Err != nil {
		t.Fatalf("got %+v, want mine", r)
	}
	if tr.Len() != 0 {
		t.Fatalf("%d pending after the reply", tr.Len())
	}
}

func TestEarlyReplyKeptUntilProposed(t *testing.T) {
	tr := leader(5)
	tk, _, _ := tr.Register("req")
	tr.Resolve([]byte("req"), 5, Reply[string]{Value: "early"})
	noReply(t, tk, "reply before Proposed")
	tr.Proposed([]Ticket[string]{tk}, 5)
	if r := received(t, tk); r.Value != "early" {
		t.Fatalf("early reply lost: %+v", r)
	}
}

func TestProposedInAnotherTermFails(t *testing.T) {
	tr := leader(5)
	tk, _, _ := tr.Register("req")
	tr.Proposed([]Ticket[string]{tk}, 6) // raft moved on before we heard
	if r := received(t, tk); !errors.Is(r.Err, rpc.ErrLostLeadership) {
		t.Fatalf("got %+v, want ErrLostLeadership", r)
	}
}

func TestRetryTakesOverReply(t *testing.T) {
	tr := leader(5)
	first, _, _ := tr.Register("req")
	tr.Proposed([]Ticket[string]{first}, 5)
	second, propose, err := tr.Register("req")
	if err != nil || propose {
		t.Fatalf("retry Register = %v, %v; want a takeover without proposing", propose, err)
	}
	if r := received(t, first); !errors.Is(r.Err, ErrSuperseded) || !errors.Is(r.Err, rpc.ErrLostLeadership) {
		t.Fatalf("superseded waiter got %+v", r)
	}
	if !tr.Alive(first) || !tr.Alive(second) {
		t.Fatal("the request is no longer alive after the takeover")
	}
	tr.Forget(first) // the old caller going away must not drop the retry
	tr.Resolve([]byte("req"), 5, Reply[string]{Value: "done"})
	if r := received(t, second); r.Value != "done" {
		t.Fatalf("retry got %+v", r)
	}
}

func TestForgetAndFail(t *testing.T) {
	tr := leader(5)
	tk, _, _ := tr.Register("a")
	tr.Forget(tk)
	if tr.Alive(tk) || tr.Len() != 0 {
		t.Fatal("forgotten request still pending")
	}
	tk, _, _ = tr.Register("b")
	refused := errors.New("refused")
	tr.Fail([]Ticket[string]{tk}, refused)
	if r := received(t, tk); !errors.Is(r.Err, refused) {
		t.Fatalf("got %+v, want the refusal", r)
	}
}

func TestOverloaded(t *testing.T) {
	tr := NewTracker[string](1)
	tr.SetLeadership(1, 1, true)
	if _, _, err := tr.Register("a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.Register("b"); !errors.Is(err, rpc.ErrOverloaded) {
		t.Fatalf("second Register = %v, want ErrOverloaded", err)
	}
}

func TestLeadershipLossFailsEverything(t *testing.T) {
	tr := leader(5)
	tk, _, _ := tr.Register("req")
	if tr.SetLeadership(1, 4, false) {
		t.Fatal("an event of an older term counted as a loss")
	}
	noReply(t, tk, "stale event")
	if !tr.SetLeadership(2, 7, false) {
		t.Fatal("step-down not reported as a loss")
	}
	if r := received(t, tk); !errors.Is(r.Err, rpc.ErrLostLeadership) {
		t.Fatalf("step-down: %+v", r)
	}
	var nl *rpc.NotLeaderError
	if _, _, err := tr.Register("req2"); !errors.As(err, &nl) || nl.Leader != 2 || nl.Term != 7 {
		t.Fatalf("follower Register = %v, want NotLeader(2, 7)", err)
	}
	// Re-elected in a new term: pending requests of the old one are gone.
	tr.SetLeadership(1, 8, true)
	tk, _, _ = tr.Register("req3")
	if !tr.SetLeadership(1, 9, true) {
		t.Fatal("re-election in a new term not reported as a loss")
	}
	if r := received(t, tk); !errors.Is(r.Err, rpc.ErrLostLeadership) {
		t.Fatalf("re-election: %+v", r)
	}
}

func TestClose(t *testing.T) {
	tr := leader(5)
	tk, _, _ := tr.Register("req")
	tr.Close()
	if r := received(t, tk); !errors.Is(r.Err, rpc.ErrLostLeadership) {
		t.Fatalf("Close: %+v", r)
	}
	var nl *rpc.NotLeaderError
	if _, _, err := tr.Register("again"); !errors.As(err, &nl) || nl.Leader != 0 {
		t.Fatalf("Register after Close = %v, want NotLeader pointing nowhere", err)
	}
	if leading, _, _ := tr.Leadership(); leading {
		t.Fatal("closed tracker still leads")
	}
}
