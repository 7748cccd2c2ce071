package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/rpc"
)

// testPlacement is a placement record of R = 3 in which partition 2's
// replica moves from node 3 to node 4; when progressing, each read shows
// node 4's replica one step further (incoming, learner, voter).
type testPlacement struct {
	mu          sync.Mutex
	view        admin.PlacementView
	progressing bool
	reads       int
	refuse      string // Move answers a *ConflictError with it when set
	calls       []string
}

func newTestPlacement() *testPlacement {
	return &testPlacement{view: admin.PlacementView{Replication: 3, Partitions: []admin.PartitionPlacement{
		{ID: 1, Replicas: []admin.ReplicaRole{{Node: 1, Role: "voter"}, {Node: 2, Role: "voter"}, {Node: 3, Role: "voter"}},
			PreferredLeader: 1, Leader: 1, Version: 4},
		{ID: 2, Replicas: []admin.ReplicaRole{{Node: 1, Role: "voter"}, {Node: 2, Role: "voter"}, {Node: 3, Role: "outgoing"}, {Node: 4, Role: "incoming"}},
			PreferredLeader: 2, Version: 7, Move: &admin.MoveView{From: []uint64{3}, To: []uint64{4}}},
	}}}
}

func (p *testPlacement) Placement(context.Context) (admin.PlacementView, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.progressing {
		p.view.Partitions[1].Replicas[3].Role = []string{"incoming", "learner", "voter"}[min(p.reads, 2)]
	}
	p.reads++
	v := p.view
	v.Partitions = append([]admin.PartitionPlacement{}, p.view.Partitions...)
	for i := range v.Partitions {
		v.Partitions[i].Replicas = append([]admin.ReplicaRole{}, v.Partitions[i].Replicas...)
	}
	return v, nil
}

func (p *testPlacement) SetReplication(_ context.Context, r int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("replication %d", r))
	return nil
}

func (p *testPlacement) SetPaused(_ context.Context, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.view.Paused = paused
	p.calls = append(p.calls, fmt.Sprintf("paused %t", paused))
	return nil
}

func (p *testPlacement) Move(_ context.Context, part uint32, from, to uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse != "" {
		return &admin.ConflictError{Reason: p.refuse}
	}
	if from > 5 || to > 5 {
		return fmt.Errorf("node %d: %w", max(from, to), rpc.ErrNotFound)
	}
	p.calls = append(p.calls, fmt.Sprintf("move %d %d->%d", part, from, to))
	return nil
}

// startPlacementAdmin serves the real admin API with pl as its placement record.
func startPlacementAdmin(t *testing.T, token string, pl admin.Placement) string {
	t.Helper()
	h, err := admin.New(admin.Config{Cluster: testCluster{ready: true}, Invocations: noInvocations{},
		Registry: &testRegistry{svcs: map[string]*rpc.Service{}}, Placement: pl, Partitions: 2, Token: token, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestPlacementShowCLI(t *testing.T) {
	url := startPlacementAdmin(t, "tok", newTestPlacement())
	res := runCLI(t, "", "placement", "show", "--admin", url, "--admin-token", "tok")
	if res.code != 0 {
		t.Fatalf("show: exit %d, %s", res.code, res.stderr)
	}
	want := "replication 3, rebalancing on\n\n" +
		"PARTITION  REPLICAS (node:role)                   PREFERRED  LEADER  VERSION  MOVE\n" +
		"1          1:voter 2:voter 3:voter                1          1       4        -\n" +
		"2          1:voter 2:voter 3:outgoing 4:incoming  2          none    7        3 → 4\n"
	if res.stdout != want {
		t.Fatalf("show:\n%s\nwant:\n%s", res.stdout, want)
	}

	res = runCLI(t, "", "placement", "show", "--json", "--admin", url, "--admin-token", "tok")
	var v admin.PlacementView
	if err := json.Unmarshal([]byte(res.stdout), &v); res.code != 0 || err != nil || len(v.Partitions) != 2 || v.Partitions[1].Move.To[0] != 4 {
		t.Fatalf("show --json: %v %+v", err, res)
	}
	res = runCLI(t, "", "placement", "show", "--admin", url)
	if res.code == 0 || !strings.Contains(res.stderr, "show placement: 401 from admin: missing or wrong admin token") {
		t.Fatalf("without token: %+v", res)
	}
	// A node without membership says so.
	res = runCLI(t, "", "placement", "show", "--admin", startAdmin(t, "", &testRegistry{svcs: map[string]*rpc.Service{}}))
	if res.code == 0 || !strings.Contains(res.stderr, "501 from admin: this node does not serve placement") {
		t.Fatalf("without membership: %+v", res)
	}
}

func TestPlacementChangesCLI(t *testing.T) {
	pl := newTestPlacement()
	url := startPlacementAdmin(t, "", pl)
	for _, c := range []struct {
		args []string
		out  string
	}{
		{[]string{"pause"}, "rebalancing paused: no new move starts; lost replicas are still repaired (undo with: raftgate placement resume)\n"},
		{[]string{"resume"}, "rebalancing resumed\n"},
		{[]string{"set-replication", "5"}, "replication set to 5: partitions move toward 5 replicas each (follow with: raftgate placement show)\n"},
		{[]string{"move", "2", "--from", "3", "--to", "5"}, "partition 2: moving its replica from node 3 to node 5 (follow with: raftgate placement show)\n"},
	} {
		res := runCLI(t, "", append(append([]string{"placement"}, c.args...), "--admin", url)...)
		if res.code != 0 || res.stdout != c.out {
			t.Fatalf("placement %v: %+v, want stdout %q", c.args, res, c.out)
		}
	}
	if got, want := strings.Join(pl.calls, ","), "paused true,paused false,replication 5,move 2 3->5"; got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}

	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"move", "2", "--from", "3"}, "move needs --from and --to"},
		{[]string{"move", "x", "--from", "3", "--to", "4"}, `malformed partition "x"`},
		{[]string{"move", "9", "--from", "3", "--to", "4"}, "move partition 9: 404 from admin: no partition 9: partitions are 1 to 2"},
		{[]string{"move", "2", "--from", "3", "--to", "9"}, "move partition 2: 404 from admin: move partition 2 from node 3 to node 9: node 9: not found"},
		{[]string{"set-replication", "0"}, `malformed replication "0"`},
		{[]string{"set-replication"}, "accepts 1 arg(s)"},
	} {
		res := runCLI(t, "", append(append([]string{"placement"}, c.args...), "--admin", url)...)
		if res.code != 1 || !strings.Contains(res.stderr, c.err) {
			t.Fatalf("placement %v: %+v, want stderr with %q", c.args, res, c.err)
		}
	}
	pl.refuse = "node 5 is draining"
	res := runCLI(t, "", "placement", "move", "2", "--from", "3", "--to", "5", "--admin", url)
	if res.code != 1 || res.stderr != "raftgate: partition 2 was not moved: move partition 2 from node 3 to node 5: node 5 is draining\n" {
		t.Fatalf("refused move: %+v", res)
	}
}

// TestStatusStuckMove: with --stuck-after, status fails when a move in
// flight shows no progress between two reads, and passes when it does.
func TestStatusStuckMove(t *testing.T) {
	stuck := startPlacementAdmin(t, "", newTestPlacement())
	res := runCLI(t, "", "status", "--stuck-after", "20ms", "--admin", stuck)
	want := "raftgate: partition 2: move 3 → 4 made no progress in 20ms (replicas 1:voter 2:voter 3:outgoing 4:incoming, no leader, version 7)\n"
	if res.code != 1 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stdout, "2 partitions, ready") {
		t.Fatalf("stuck move: %+v, want stderr with %q", res, want)
	}
	// Without the flag, placement is not read.
	if res = runCLI(t, "", "status", "--admin", stuck); res.code != 0 {
		t.Fatalf("status without --stuck-after: %+v", res)
	}

	progressing := newTestPlacement()
	progressing.progressing = true
	res = runCLI(t, "", "status", "--stuck-after", "20ms", "--admin", startPlacementAdmin(t, "", progressing))
	if res.code != 0 || strings.Contains(res.stderr, "no progress") {
		t.Fatalf("progressing move: %+v", res)
	}
	// Nothing in flight: one read, no wait.
	settled := newTestPlacement()
	settled.view.Partitions[1].Move = nil
	res = runCLI(t, "", "status", "--stuck-after", "1h", "--admin", startPlacementAdmin(t, "", settled))
	settled.mu.Lock()
	reads := settled.reads
	settled.mu.Unlock()
	if res.code != 0 || reads != 1 {
		t.Fatalf("no move in flight: %+v, %d reads", res, reads)
	}
	// The check cannot be made on a node without membership: fail, saying so.
	res = runCLI(t, "", "status", "--stuck-after", "20ms", "--admin", startAdmin(t, "", &testRegistry{svcs: map[string]*rpc.Service{}}))
	if res.code != 1 || !strings.Contains(res.stderr, "--stuck-after: read placement: 501") {
		t.Fatalf("without membership: %+v", res)
	}
}
