package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/raftgate/raftgate/rpc"
)

// fakePlacement is a placement record; Move starts a move unless refuse
// names a reason, and knows nodes 1 to 5 only.
type fakePlacement struct {
	mu     sync.Mutex
	view   PlacementView
	refuse string // Move answers a *ConflictError with it when set
	err    error  // returned by every call when set
	calls  []string
}

func (f *fakePlacement) Placement(context.Context) (PlacementView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return PlacementView{}, f.err
	}
	return f.view, nil
}

func (f *fakePlacement) SetReplication(_ context.Context, r int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if r > 5 {
		return fmt.Errorf("%w: replication %d exceeds the 5 active nodes", rpc.ErrInvalid, r)
	}
	f.view.Replication = r
	f.calls = append(f.calls, fmt.Sprintf("replication %d", r))
	return nil
}

func (f *fakePlacement) SetPaused(_ context.Context, paused bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.view.Paused = paused
	f.calls = append(f.calls, fmt.Sprintf("paused %t", paused))
	return nil
}

func (f *fakePlacement) Move(_ context.Context, p uint32, from, to uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.err != nil:
		return f.err
	case from > 5 || to > 5:
		return fmt.Errorf("node %d: %w", max(from, to), rpc.ErrNotFound)
	case f.refuse != "":
		return &ConflictError{Reason: f.refuse}
	}
	f.view.Partitions[p-1].Move = &MoveView{From: []uint64{from}, To: []uint64{to}}
	f.calls = append(f.calls, fmt.Sprintf("move %d %d->%d", p, from, to))
	return nil
}

// twoPartitions is a placement of R = 3 with partition 2 moving from node 3 to node 4.
func twoPartitions() PlacementView {
	return PlacementView{Replication: 3, Partitions: []PartitionPlacement{
		{ID: 1, Replicas: []ReplicaRole{{1, "voter"}, {2, "voter"}, {3, "voter"}}, PreferredLeader: 1, Leader: 1, Version: 4},
		{ID: 2, Replicas: []ReplicaRole{{2, "voter"}, {3, "outgoing"}, {1, "voter"}, {4, "incoming"}}, PreferredLeader: 2, Version: 7,
			Move: &MoveView{From: []uint64{3}, To: []uint64{4}}},
	}}
}

func TestPlacementShow(t *testing.T) {
	pl := &fakePlacement{view: twoPartitions()}
	f := newFixture(t, func(c *Config) { c.Placement = pl })

	a := f.do(t, "GET", "/placement", "")
	if a.status != http.StatusOK {
		t.Fatalf("GET /placement: %d %s", a.status, a.body)
	}
	got := decode[PlacementView](t, a)
	if got.Replication != 3 || len(got.Partitions) != 2 || got.Partitions[1].Replicas[3] != (ReplicaRole{4, "incoming"}) ||
		got.Partitions[1].Move.To[0] != 4 || got.Partitions[0].Move != nil {
		t.Fatalf("GET /placement: %+v", got)
	}
	for _, field := range []string{`"replication": 3`, `"paused": false`, `"partitions"`, `"id"`, `"replicas"`, `"node"`, `"role"`,
		`"preferredLeader"`, `"leader": 0`, `"version"`, `"move": null`, `"from"`, `"to"`} {
		if !strings.Contains(string(a.body), field) {
			t.Errorf("GET /placement lacks %s: %s", field, a.body)
		}
	}

	// Empty lists are [], never null; the implementation's slices are not changed.
	pl.view = PlacementView{Replication: 1, Partitions: []PartitionPlacement{{ID: 1, Move: &MoveView{To: []uint64{2}}}}}
	a = f.do(t, "GET", "/placement", "")
	for _, want := range []string{`"replicas": []`, `"from": []`} {
		if !strings.Contains(string(a.body), want) {
			t.Errorf("GET /placement lacks %s: %s", want, a.body)
		}
	}
	if pl.view.Partitions[0].Replicas != nil || pl.view.Partitions[0].Move.From != nil {
		t.Fatalf("GET /placement changed the implementation's record: %+v", pl.view.Partitions[0])
	}
	pl.view = PlacementView{}
	if a = f.do(t, "GET", "/placement", ""); !strings.Contains(string(a.body), `"partitions": []`) {
		t.Fatalf("no partitions: %s", a.body)
	}
	wantError(t, f.do(t, "POST", "/placement", ""), http.StatusMethodNotAllowed, "not allowed")
}

func TestPlacementChanges(t *testing.T) {
	pl := &fakePlacement{view: twoPartitions()}
	f := newFixture(t, func(c *Config) { c.Placement = pl })

	if a := f.do(t, "PUT", "/placement/replication", `{"replication": 5}`); a.status != http.StatusNoContent {
		t.Fatalf("PUT /placement/replication: %d %s", a.status, a.body)
	}
	if a := f.do(t, "POST", "/placement/pause", ""); a.status != http.StatusNoContent {
		t.Fatalf("POST /placement/pause: %d %s", a.status, a.body)
	}
	if v := decode[PlacementView](t, f.do(t, "GET", "/placement", "")); v.Replication != 5 || !v.Paused {
		t.Fatalf("after the changes: %+v", v)
	}
	if a := f.do(t, "POST", "/placement/resume", ""); a.status != http.StatusNoContent {
		t.Fatalf("POST /placement/resume: %d %s", a.status, a.body)
	}
	if a := f.do(t, "POST", "/placement/partitions/1/move", `{"from": 3, "to": 5}`); a.status != http.StatusAccepted {
		t.Fatalf("move: %d %s", a.status, a.body)
	}
	want := "replication 5,paused true,paused false,move 1 3->5"
	if got := strings.Join(pl.calls, ","); got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}

	wantError(t, f.do(t, "PUT", "/placement/replication", `{"replication": 6}`), http.StatusBadRequest, "exceeds the 5 active nodes")
	for _, body := range []string{``, `{"replication": 0}`, `{"replication": -1}`, `{"replicas": 3}`, `{"replication": "3"}`, `{"replication": 3} {}`} {
		wantError(t, f.do(t, "PUT", "/placement/replication", body), http.StatusBadRequest, "set replication")
	}
	wantError(t, f.do(t, "POST", "/placement/partitions/2/move", `{"from": 3, "to": 9}`), http.StatusNotFound, "node 9")
	wantError(t, f.do(t, "POST", "/placement/partitions/99/move", `{"from": 3, "to": 4}`), http.StatusNotFound,
		fmt.Sprintf("no partition 99: partitions are 1 to %d", testPartitions))
	for _, path := range []string{"x", "0", "-1", "4294967296"} {
		wantError(t, f.do(t, "POST", "/placement/partitions/"+path+"/move", `{"from": 3, "to": 4}`), http.StatusBadRequest, "malformed partition")
	}
	for _, body := range []string{``, `{"from": 3}`, `{"from": 3, "to": 3}`, `{"from": 3, "to": 4, "force": true}`} {
		wantError(t, f.do(t, "POST", "/placement/partitions/2/move", body), http.StatusBadRequest, "move partition 2")
	}
	a := f.do(t, "GET", "/placement/pause", "")
	if wantError(t, a, http.StatusMethodNotAllowed, "not allowed"); a.header.Get("Allow") != "POST" {
		t.Fatalf("Allow %q", a.header.Get("Allow"))
	}
	wantError(t, f.do(t, "POST", "/placement/replication", `{"replication": 3}`), http.StatusMethodNotAllowed, "not allowed")
	wantError(t, f.do(t, "PUT", "/placement/partitions/2/move", `{"from": 3, "to": 4}`), http.StatusMethodNotAllowed, "not allowed")
}

func TestPlacementRefusedAndRetryable(t *testing.T) {
	const reason = "node 4 holds a snapshot in flight already"
	pl := &fakePlacement{view: twoPartitions(), refuse: reason}
	f := newFixture(t, func(c *Config) { c.Placement = pl })
	wantError(t, f.do(t, "POST", "/placement/partitions/1/move", `{"from": 3, "to": 4}`), http.StatusConflict,
		"move partition 1 from node 3 to node 4: "+reason)
	// The refusal is found however the implementation wraps it, in either type.
	pl.err = fmt.Errorf("controller: %w", &RefusedError{Reason: "rebalancing is paused"})
	wantError(t, f.do(t, "POST", "/placement/partitions/1/move", `{"from": 3, "to": 4}`), http.StatusConflict, "rebalancing is paused")

	for _, err := range []error{&rpc.NotLeaderError{Leader: 2, Term: 3}, rpc.ErrLostLeadership, rpc.ErrUnavailable} {
		pl.err = err
		for _, req := range [][3]string{{"GET", "/placement", ""}, {"PUT", "/placement/replication", `{"replication": 3}`},
			{"POST", "/placement/pause", ""}, {"POST", "/placement/resume", ""}, {"POST", "/placement/partitions/1/move", `{"from": 1, "to": 4}`}} {
			a := f.do(t, req[0], req[1], req[2])
			wantError(t, a, http.StatusServiceUnavailable, "retrying is safe")
			if a.header.Get("Retry-After") == "" {
				t.Fatalf("%s %s: 503 without Retry-After", req[0], req[1])
			}
		}
	}
	pl.err = errors.New("disk on fire")
	wantError(t, f.do(t, "POST", "/placement/pause", ""), http.StatusInternalServerError, "pause rebalancing: disk on fire")
}

func TestPlacementWithoutMembership(t *testing.T) {
	f := newFixture(t, nil)
	for _, req := range [][3]string{{"GET", "/placement", ""}, {"PUT", "/placement/replication", `{"replication": 3}`},
		{"POST", "/placement/pause", ""}, {"POST", "/placement/resume", ""}, {"POST", "/placement/partitions/1/move", `{"from": 1, "to": 4}`}} {
		wantError(t, f.do(t, req[0], req[1], req[2]), http.StatusNotImplemented, "does not serve placement")
	}
}

func TestPlacementNeedsTheToken(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Token = "s3cret"; c.Placement = &fakePlacement{view: twoPartitions()} })
	wantError(t, f.do(t, "GET", "/placement", ""), http.StatusUnauthorized, "admin token")
	wantError(t, f.do(t, "POST", "/placement/pause", ""), http.StatusUnauthorized, "admin token")
	if a := f.do(t, "GET", "/placement", "", "Authorization", "Bearer s3cret"); a.status != http.StatusOK {
		t.Fatalf("with token: %d %s", a.status, a.body)
	}
}
