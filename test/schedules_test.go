package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
)

// tickRecorder records the runs of schedules: for each scheduled time, the
// invocation ids delivered for it and how often.
type tickRecorder struct {
	srv *httptest.Server

	mu    sync.Mutex
	ticks map[string]map[string]int // x-raftgate-scheduled-time -> x-restate-id -> deliveries
	keys  map[string]int            // x-raftgate-key -> first deliveries of a tick, for keyed targets
	bad   []string                  // deliveries without the schedule's headers
}

func newTickRecorder(t *testing.T) *tickRecorder {
	r := &tickRecorder{ticks: map[string]map[string]int{}, keys: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		at, id := req.Header.Get("x-raftgate-scheduled-time"), req.Header.Get("x-restate-id")
		r.mu.Lock()
		if req.Header.Get("x-raftgate-schedule") != "tick" || at == "" {
			r.bad = append(r.bad, fmt.Sprintf("%s %v", id, req.Header))
		} else {
			if r.ticks[at] == nil {
				r.ticks[at] = map[string]int{}
				if k := req.Header.Get("x-raftgate-key"); k != "" {
					r.keys[k]++
				}
			}
			r.ticks[at][id]++
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *tickRecorder) distinctTicks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ticks)
}

// TestScheduleTicksOnceAcrossLeaderKills runs a 1-second schedule for about
// 25 s while the leader of its partition is killed twice: each tick is one
// invocation (one id, whatever the deliveries), and the ticks missed
// during the elections run afterwards (catch-up window 1m), so no tick
// between the first and the last is missing.
func TestScheduleTicksOnceAcrossLeaderKills(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: 2})
	rec := newTickRecorder(t)
	c.registerService(c.nodes[0], "Rec", rec.srv.URL)
	admin := c.nodes[0].adminURL()
	put, _ := json.Marshal(map[string]any{"target": "Rec/tick", "every": "1s", "catchupWindow": "1m", "overlap": "allow-all"})
	testutil.WaitFor(t, 20*time.Second, "schedule created", func() bool {
		r, err := do(context.Background(), http.MethodPut, admin+"/schedules/tick", put, nil)
		return err == nil && r.status == http.StatusOK
	})
	p := invocation.PartitionFor(invocation.SchedulePartitionKey("tick"), 2)
	seen := 0
	for kill := range 2 {
		seen += 5
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d ticks", seen), func() bool { return rec.distinctTicks() >= seen })
		var leader *node
		testutil.WaitFor(t, 10*time.Second, "a leader of the schedule's partition", func() bool { leader = c.leaderOf(p); return leader != nil })
		t.Logf("kill %d: node %d leads partition %d after %d ticks", kill+1, leader.id, p, rec.distinctTicks())
		c.kill(leader)
		seen += 5
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d ticks under a new leader", seen), func() bool { return rec.distinctTicks() >= seen })
		c.restart(leader) // two of three stay up for the next kill
	}
	// Stop ticking, then let every run started be delivered.
	var view struct {
		Runs    uint64 `json:"runs"`
		Skipped uint64 `json:"skipped"`
		LastRun string `json:"lastRun"`
		Paused  bool   `json:"paused"`
	}
	testutil.WaitFor(t, 20*time.Second, "schedule paused", func() bool {
		r, err := do(context.Background(), http.MethodPost, c.nodes[1].adminURL()+"/schedules/tick/pause", nil, nil)
		return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &view) == nil && view.Paused
	})
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d runs delivered", view.Runs), func() bool { return uint64(rec.distinctTicks()) >= view.Runs })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.bad) > 0 {
		t.Fatalf("deliveries without schedule headers: %v", rec.bad)
	}
	var times []time.Time
	redelivered := 0
	for at, ids := range rec.ticks {
		if len(ids) != 1 {
			t.Errorf("tick %s ran as %d invocations: %v", at, len(ids), ids)
		}
		for _, n := range ids {
			redelivered += n - 1
		}
		tm, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			t.Fatalf("scheduled time %q: %v", at, err)
		}
		times = append(times, tm)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d != time.Second {
			t.Errorf("ticks %v and %v are %v apart: a tick is missing", times[i-1], times[i], d)
		}
	}
	if uint64(len(times)) != view.Runs || view.Skipped != 0 {
		t.Errorf("%d ticks seen, schedule says %d runs, %d skipped", len(times), view.Runs, view.Skipped)
	}
	t.Logf("%d ticks from %v to %v, each one invocation; %d repeated deliveries (at-least-once)", len(times), times[0].Format(time.TimeOnly), times[len(times)-1].Format(time.TimeOnly), redelivered)

	// The CLI shows it.
	out, err := exec.Command(binary, "schedules", "list", "--admin", admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "tick") || !strings.Contains(string(out), "paused") {
		t.Fatalf("schedules list: %v\n%s", err, out)
	}
}

// TestScheduleBoundsRepeatAndBackfill drives the command line against one
// node: a repeating interval bounded by a start and an end runs the ticks
// between them and then shows ended; a backfill of a past range runs each
// of its ticks once, again it runs none, and a range over the bound or an
// ISO form that is not supported is a 400.
func TestScheduleBoundsRepeatAndBackfill(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 1, partitions: 1})
	rec := newTickRecorder(t)
	c.registerService(c.nodes[0], "Rec", rec.srv.URL)
	admin := c.nodes[0].adminURL()
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append(args, "--admin", admin)...).CombinedOutput()
		if err != nil {
			t.Fatalf("raftgate %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	end := start.Add(2 * time.Second)
	rfc := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	cli("schedules", "add", "tick", "Rec/tick", "--every", "R/PT1S", "--start", rfc(start), "--end", rfc(end), "--overlap", "allow-all")
	testutil.WaitFor(t, 30*time.Second, "the schedule ended", func() bool {
		return strings.Contains(cli("schedules", "list"), "ended")
	})
	testutil.WaitFor(t, 10*time.Second, "3 ticks delivered", func() bool { return rec.distinctTicks() >= 3 })
	rec.mu.Lock()
	for at := range rec.ticks {
		if tm, _ := time.Parse(time.RFC3339Nano, at); tm.Before(start) || tm.After(end) {
			t.Errorf("tick %s outside %v..%v", at, start, end)
		}
	}
	if len(rec.ticks) != 3 {
		t.Errorf("%d ticks, want 3 (start, start+1s, end)", len(rec.ticks))
	}
	rec.mu.Unlock()

	// Unbounded now; backfill ten past seconds, twice.
	cli("schedules", "add", "tick", "Rec/tick", "--every", "1s", "--paused")
	from := start.Add(-20 * time.Second)
	if out := cli("schedules", "backfill", "tick", "--from", rfc(from), "--to", rfc(from.Add(9*time.Second))); !strings.Contains(out, "10 ticks, 10 runs started") {
		t.Fatalf("backfill: %s", out)
	}
	if out := cli("schedules", "backfill", "tick", "--from", rfc(from), "--to", rfc(from.Add(9*time.Second))); !strings.Contains(out, "10 ticks, 0 runs started") {
		t.Fatalf("backfill again: %s", out)
	}
	testutil.WaitFor(t, 20*time.Second, "13 ticks delivered", func() bool { return rec.distinctTicks() >= 13 })
	rec.mu.Lock()
	for at, ids := range rec.ticks {
		if len(ids) != 1 {
			t.Errorf("tick %s ran as %d invocations", at, len(ids))
		}
	}
	rec.mu.Unlock()

	for _, bad := range []struct{ path, body, want string }{
		{"/schedules/tick/backfill", fmt.Sprintf(`{"from":%q,"to":%q}`, rfc(from.Add(-2*time.Hour)), rfc(from)), "more than 1000"},
		{"/schedules/tick/backfill", fmt.Sprintf(`{"from":%q,"to":%q}`, rfc(from), rfc(time.Now().Add(time.Hour))), "must be past"},
	} {
		r, err := do(context.Background(), http.MethodPost, admin+bad.path, []byte(bad.body), nil)
		if err != nil || r.status != http.StatusBadRequest || !strings.Contains(string(r.body), bad.want) {
			t.Fatalf("POST %s %s: %v %+v, want 400 %q", bad.path, bad.body, err, r, bad.want)
		}
	}
	r, err := do(context.Background(), http.MethodPut, admin+"/schedules/tick", []byte(`{"target":"Rec/tick","every":"R5/PT1S"}`), nil)
	if err != nil || r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "a count needs a start") {
		t.Fatalf("PUT every R5/PT1S: %v %+v, want 400", err, r)
	}
}

// TestScheduleKeyedTargetAcrossPartitions runs a 1-second schedule whose
// target is an object key living in another partition than the schedule,
// while the leader of the schedule's partition is killed: each tick is one
// invocation, delivered with its key, and no tick between the first and
// the last is missing.
func TestScheduleKeyedTargetAcrossPartitions(t *testing.T) {
	const partitions = 2
	c := startCluster(t, clusterOpts{nodes: 3, partitions: partitions})
	rec := newTickRecorder(t)
	reg, _ := json.Marshal(map[string]any{"url": rec.srv.URL, "kind": "object"})
	testutil.WaitFor(t, 20*time.Second, "object registered", func() bool {
		r, err := do(context.Background(), http.MethodPut, c.nodes[0].adminURL()+"/services/Rec", reg, nil)
		return err == nil && r.status/100 == 2
	})
	p := invocation.PartitionFor(invocation.SchedulePartitionKey("tick"), partitions)
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); invocation.PartitionFor(invocation.KeyedPartitionKey("Rec", k), partitions) != p {
			key = k
		}
	}
	put, _ := json.Marshal(map[string]any{"target": "Rec/" + key + "/tick", "every": "1s", "catchupWindow": "1m"})
	admin := c.nodes[0].adminURL()
	testutil.WaitFor(t, 20*time.Second, "schedule created", func() bool {
		r, err := do(context.Background(), http.MethodPut, admin+"/schedules/tick", put, nil)
		return err == nil && r.status == http.StatusOK
	})
	testutil.WaitFor(t, 30*time.Second, "4 ticks", func() bool { return rec.distinctTicks() >= 4 })
	var leader *node
	testutil.WaitFor(t, 10*time.Second, "a leader of the schedule's partition", func() bool { leader = c.leaderOf(p); return leader != nil })
	t.Logf("schedule in partition %d, key %s in the other; killing node %d after %d ticks", p, key, leader.id, rec.distinctTicks())
	c.kill(leader)
	testutil.WaitFor(t, 30*time.Second, "8 ticks under a new leader", func() bool { return rec.distinctTicks() >= 8 })
	c.restart(leader)
	var view struct {
		Runs        uint64 `json:"runs"`
		Skipped     uint64 `json:"skipped"`
		Paused      bool   `json:"paused"`
		Dispatching int    `json:"dispatching"`
		Target      string `json:"target"`
	}
	other := c.nodes[leader.id%3].adminURL()
	testutil.WaitFor(t, 20*time.Second, "schedule paused", func() bool {
		r, err := do(context.Background(), http.MethodPost, other+"/schedules/tick/pause", nil, nil)
		return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &view) == nil && view.Paused
	})
	testutil.WaitFor(t, 30*time.Second, "every run handed over and delivered", func() bool {
		r, err := do(context.Background(), http.MethodGet, other+"/schedules/tick", nil, nil)
		return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &view) == nil &&
			view.Dispatching == 0 && uint64(rec.distinctTicks()) >= view.Runs
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.bad) > 0 {
		t.Fatalf("deliveries without schedule headers: %v", rec.bad)
	}
	var times []time.Time
	for at, ids := range rec.ticks {
		if len(ids) != 1 {
			t.Errorf("tick %s ran as %d invocations: %v", at, len(ids), ids)
		}
		tm, _ := time.Parse(time.RFC3339Nano, at)
		times = append(times, tm)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d != time.Second {
			t.Errorf("ticks %v and %v are %v apart: a tick is missing", times[i-1], times[i], d)
		}
	}
	if uint64(len(times)) != view.Runs || view.Skipped != 0 || view.Target != "Rec/"+key+"/tick" {
		t.Errorf("%d ticks seen; schedule: %+v", len(times), view)
	}
	if n := len(rec.keys); n != 1 || rec.keys[key] != len(times) {
		t.Errorf("deliveries by key %v, want all %d with %s", rec.keys, len(times), key)
	}
}
