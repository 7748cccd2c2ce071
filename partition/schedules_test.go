package partition

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// waitUntil polls cond until it holds or 10 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func scheduleReq(op any) *rpc.ScheduleRequest {
	switch o := op.(type) {
	case *rpc.PutSchedule:
		o.RequestId = invocation.NewRequestID()
		return &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Put{Put: o}}
	case *rpc.PauseSchedule:
		o.RequestId = invocation.NewRequestID()
		return &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Pause{Pause: o}}
	case *rpc.TriggerSchedule:
		o.RequestId = invocation.NewRequestID()
		return &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Trigger{Trigger: o}}
	case *rpc.DeleteSchedule:
		o.RequestId = invocation.NewRequestID()
		return &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Delete{Delete: o}}
	case *rpc.BackfillSchedule:
		o.RequestId = invocation.NewRequestID()
		return &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Backfill{Backfill: o}}
	}
	panic(fmt.Sprintf("no request for %T", op))
}

// readSchedule reads a replica's stored schedule (nil if none).
func readSchedule(t *testing.T, r *replica, id string) *rpc.ScheduleState {
	t.Helper()
	var st *rpc.ScheduleState
	if err := r.View(context.Background(), func(b *bolt.Bucket) error {
		var err error
		st, err = getSchedule(b, id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// scheduleFixture is a cluster of n replicas on a manual clock with a
// recording service "Tick".
type scheduleFixture struct {
	t     *testing.T
	c     *fakeCluster
	clock *manualClock
	svc   *recordingService
}

func newScheduleFixture(t *testing.T, n int) *scheduleFixture {
	f := &scheduleFixture{t: t, clock: newManualClock(), svc: newRecordingService(t)}
	f.c = newFakeCluster(t, n, func(_ int, cfg *Config) {
		cfg.Clock = f.clock.Now
		cfg.Services = f.svc.lookup("Tick")
	})
	f.c.setLeader(0, false)
	return f
}

func (f *scheduleFixture) leader() *replica {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	return f.c.replicas[f.c.leader]
}

func (f *scheduleFixture) put(spec *rpc.ScheduleSpec) {
	f.t.Helper()
	if _, err := f.leader().p.Schedule(ctxT(f.t), scheduleReq(&rpc.PutSchedule{Spec: spec})); err != nil {
		f.t.Fatal(err)
	}
}

// advance moves the clock on and lets the leader's scheduler look.
func (f *scheduleFixture) advance(d time.Duration) {
	f.clock.Advance(d)
	f.leader().p.wakeScheduler()
}

// waitState waits until the leader's stored schedule satisfies cond.
func (f *scheduleFixture) waitState(what string, id string, cond func(*rpc.ScheduleState) bool) *rpc.ScheduleState {
	f.t.Helper()
	var st *rpc.ScheduleState
	waitUntil(f.t, what, func() bool {
		f.leader().p.wakeScheduler()
		st = readSchedule(f.t, f.leader(), id)
		return st != nil && cond(st)
	})
	return st
}

// Each tick is one invocation, with the id derived from (schedule, tick)
// and the tick's time in its headers, across a leader change that
// repeats an in-flight tick, and a stale tick proposed again.
func TestScheduleOneRunPerTickAcrossLeaderChange(t *testing.T) {
	f := newScheduleFixture(t, 3)
	f.put(&rpc.ScheduleSpec{Id: "s1", Service: "Tick", Handler: "tick", EveryMs: 1000, CatchupWindowMs: 60_000, Overlap: "allow-all"})
	start := readSchedule(t, f.leader(), "s1").NextTickUnixMs
	if start != f.clock.Now().Add(time.Second).UnixMilli() {
		t.Fatalf("first tick %d, want now+1s %d", start, f.clock.Now().Add(time.Second).UnixMilli())
	}
	var ticks []int64
	for i := range 10 {
		f.advance(time.Second)
		tick := start + int64(i)*1000
		ticks = append(ticks, tick)
		f.waitState("tick fired", "s1", func(st *rpc.ScheduleState) bool { return st.LastTickUnixMs == tick })
		if i == 4 {
			// A new leader, and the old leader's tick (here with skipped
			// ticks of its own view) proposed again after it applied:
			// both change nothing.
			f.c.setLeader(1, true)
			stale := &rpc.ScheduleTick{Id: "s1", FromUnixMs: tick, FireUnixMs: tick, Skipped: 2, NextTickUnixMs: tick + 1000, ProposedAtUnixMs: f.clock.Now().UnixMilli()}
			f.leader().p.submit(ctxT(t), &rpc.Command{Cmd: &rpc.Command_ScheduleTick{ScheduleTick: stale}}, nil)
		}
	}
	waitUntil(t, "every run delivered", func() bool { ids, _ := f.svc.total(); return ids == len(ticks) })
	for _, tick := range ticks {
		id := invocation.ScheduledRun("s1", tick, nil)
		if n := f.svc.count(id); n < 1 {
			t.Fatalf("tick %d: run %s not delivered", tick, id)
		}
		f.svc.mu.Lock()
		h := f.svc.headers[id.String()]
		f.svc.mu.Unlock()
		if h.Get(headerSchedule) != "s1" || h.Get(headerScheduledTime) != time.UnixMilli(tick).UTC().Format(time.RFC3339Nano) {
			t.Fatalf("tick %d: headers %v", tick, h)
		}
	}
	st := readSchedule(t, f.leader(), "s1")
	if st.Runs != uint64(len(ticks)) || st.Skipped != 0 {
		t.Fatalf("runs %d skipped %d, want %d and 0", st.Runs, st.Skipped, len(ticks))
	}
	// Every replica holds the same state.
	f.c.waitApplied()
	if a, b := f.c.replicas[0].dump(t), f.c.replicas[2].dump(t); a != b {
		t.Fatal("replicas differ")
	}
}

// Ticks due longer ago than the catch-up window are skipped and counted;
// those within it run, oldest first.
func TestScheduleCatchupWindow(t *testing.T) {
	f := newScheduleFixture(t, 1)
	f.put(&rpc.ScheduleSpec{Id: "c", Service: "Tick", Handler: "tick", EveryMs: 1000, CatchupWindowMs: 5000, Overlap: "allow-all"})
	start := readSchedule(t, f.leader(), "c").NextTickUnixMs
	f.advance(100 * time.Second) // ticks start .. start+99s are due
	st := f.waitState("caught up", "c", func(st *rpc.ScheduleState) bool { return st.NextTickUnixMs > f.clock.Now().UnixMilli() })
	// start+99s is the newest due; those due before now-5s are skipped:
	// start .. start+93s (94 ticks); start+94s .. start+99s run (6).
	if st.Skipped != 94 || st.Runs != 6 || st.LastTickUnixMs != start+99_000 {
		t.Fatalf("skipped %d runs %d last %d, want 94, 6, %d", st.Skipped, st.Runs, st.LastTickUnixMs, start+99_000)
	}
}

// The overlap policies against a run that does not finish.
func TestScheduleOverlapPolicies(t *testing.T) {
	for _, tc := range []struct {
		overlap             string
		wantRuns, wantSkips uint64 // while blocked, after 3 more ticks
		afterRelease        uint64 // runs once the blocked one completes
	}{
		{"skip", 1, 3, 1},
		{"buffer-one", 1, 2, 2},
		{"allow-all", 4, 0, 4},
	} {
		t.Run(tc.overlap, func(t *testing.T) {
			f := newScheduleFixture(t, 1)
			block := make(chan struct{})
			f.svc.mu.Lock()
			f.svc.block = block
			f.svc.mu.Unlock()
			f.put(&rpc.ScheduleSpec{Id: "o", Service: "Tick", Handler: "tick", EveryMs: 1000, CatchupWindowMs: 60_000, Overlap: tc.overlap})
			start := readSchedule(t, f.leader(), "o").NextTickUnixMs
			for i := range 4 {
				f.advance(time.Second)
				next := start + int64(i+1)*1000
				f.waitState("tick applied", "o", func(st *rpc.ScheduleState) bool { return st.NextTickUnixMs == next })
			}
			st := readSchedule(t, f.leader(), "o")
			if st.Runs != tc.wantRuns || st.Skipped != tc.wantSkips {
				t.Fatalf("blocked: runs %d skipped %d, want %d %d", st.Runs, st.Skipped, tc.wantRuns, tc.wantSkips)
			}
			f.svc.mu.Lock()
			f.svc.block = nil
			f.svc.mu.Unlock()
			close(block)
			f.waitState("runs after release", "o", func(st *rpc.ScheduleState) bool { return st.Runs == tc.afterRelease && len(st.Running) == 0 })
			if ids, _ := f.svc.total(); uint64(ids) != tc.afterRelease {
				t.Fatalf("%d runs delivered, want %d", ids, tc.afterRelease)
			}
		})
	}
}

// Pause stops ticks (none is caught up on resume); trigger runs at once,
// once per request; delete stops the schedule.
func TestSchedulePauseResumeTriggerDelete(t *testing.T) {
	f := newScheduleFixture(t, 1)
	p := f.leader().p
	f.put(&rpc.ScheduleSpec{Id: "p", Service: "Tick", Handler: "tick", EveryMs: 1000, CatchupWindowMs: 3_600_000})
	if _, err := p.Schedule(ctxT(t), scheduleReq(&rpc.PauseSchedule{Id: "p", Paused: true})); err != nil {
		t.Fatal(err)
	}
	f.advance(time.Minute)
	trig := scheduleReq(&rpc.TriggerSchedule{Id: "p"})
	list, err := p.Schedule(ctxT(t), trig)
	if err != nil || len(list.Triggered) != invocation.IDLen {
		t.Fatalf("trigger: %v %v", list, err)
	}
	again, err := p.Schedule(ctxT(t), trig) // the same request again: the same run
	if err != nil || string(again.Triggered) != string(list.Triggered) {
		t.Fatalf("trigger retried: %x, want %x (%v)", again.GetTriggered(), list.Triggered, err)
	}
	st := readSchedule(t, f.leader(), "p")
	if st.Runs != 1 || st.Skipped != 0 || !st.Spec.Paused {
		t.Fatalf("paused: runs %d skipped %d paused %v", st.Runs, st.Skipped, st.Spec.Paused)
	}
	if _, err := p.Schedule(ctxT(t), scheduleReq(&rpc.PauseSchedule{Id: "p", Paused: false})); err != nil {
		t.Fatal(err)
	}
	if st := readSchedule(t, f.leader(), "p"); st.NextTickUnixMs != f.clock.Now().Add(time.Second).UnixMilli() {
		t.Fatalf("resumed: next tick %d, want now+1s", st.NextTickUnixMs)
	}
	// A tick while the triggered run is still running would be skipped.
	f.waitState("triggered run finished", "p", func(st *rpc.ScheduleState) bool { return len(st.Running) == 0 })
	f.advance(time.Second)
	f.waitState("tick after resume", "p", func(st *rpc.ScheduleState) bool { return st.Runs == 2 && st.Skipped == 0 })
	if _, err := p.Schedule(ctxT(t), scheduleReq(&rpc.DeleteSchedule{Id: "p"})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Schedule(ctxT(t), &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Get{Get: "p"}}); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// No tick runs before the start or after the end; an ended schedule has no
// next tick. A repeating interval with a count stops after its ticks.
func TestScheduleStartEndAndRepeat(t *testing.T) {
	f := newScheduleFixture(t, 1)
	now := f.clock.Now().UnixMilli()
	start, end := now-now%1000+5000, now-now%1000+7000
	f.put(&rpc.ScheduleSpec{Id: "b", Service: "Tick", Handler: "tick", EveryMs: 1000, CatchupWindowMs: 60_000, Overlap: "allow-all",
		StartUnixMs: start, EndUnixMs: end})
	anchor := time.UnixMilli(start).UTC().Format(time.RFC3339Nano)
	f.put(&rpc.ScheduleSpec{Id: "r", Service: "Tick", Handler: "tick", Repeat: "R2/" + anchor + "/PT1S", CatchupWindowMs: 60_000, Overlap: "allow-all"})
	for _, id := range []string{"b", "r"} {
		if st := readSchedule(t, f.leader(), id); st.NextTickUnixMs != start {
			t.Fatalf("%s: first tick %d, want the start %d", id, st.NextTickUnixMs, start)
		}
	}
	for range 10 {
		f.advance(time.Second)
	}
	b := f.waitState("b ended", "b", func(st *rpc.ScheduleState) bool { return st.NextTickUnixMs == 0 })
	r := f.waitState("r ended", "r", func(st *rpc.ScheduleState) bool { return st.NextTickUnixMs == 0 })
	if b.Runs != 3 || b.Skipped != 0 || b.LastTickUnixMs != end || r.Runs != 2 || r.LastTickUnixMs != start+1000 {
		t.Fatalf("b: runs %d skipped %d last %d (want 3, 0, %d); r: runs %d last %d (want 2, %d)",
			b.Runs, b.Skipped, b.LastTickUnixMs, end, r.Runs, r.LastTickUnixMs, start+1000)
	}
	// Resumed after its end, it stays ended.
	p := f.leader().p
	for _, paused := range []bool{true, false} {
		if _, err := p.Schedule(ctxT(t), scheduleReq(&rpc.PauseSchedule{Id: "b", Paused: paused})); err != nil {
			t.Fatal(err)
		}
	}
	if st := readSchedule(t, f.leader(), "b"); st.NextTickUnixMs != 0 {
		t.Fatalf("resumed after its end: next tick %d", st.NextTickUnixMs)
	}
}

// A backfill starts one run per past tick of the range, with the tick's
// own id: repeated, it starts nothing; a range over the bound or reaching
// into the future is refused.
func TestScheduleBackfill(t *testing.T) {
	f := newScheduleFixture(t, 3)
	f.put(&rpc.ScheduleSpec{Id: "bf", Service: "Tick", Handler: "tick", EveryMs: 60_000, CatchupWindowMs: 60_000, Paused: true})
	now := f.clock.Now().UnixMilli()
	from, to := now-now%60_000-10*60_000, now-now%60_000-6*60_000 // 5 past ticks
	req := &rpc.BackfillSchedule{Id: "bf", FromUnixMs: from, ToUnixMs: to}
	list, err := f.leader().p.Schedule(ctxT(t), scheduleReq(req))
	if err != nil || list.BackfillTicks != 5 || list.BackfillStarted != 5 {
		t.Fatalf("backfill: %v, %v", list, err)
	}
	waitUntil(t, "backfilled runs delivered", func() bool { ids, _ := f.svc.total(); return ids == 5 })
	for tick := from; tick <= to; tick += 60_000 {
		if f.svc.count(invocation.ScheduledRun("bf", tick, nil)) < 1 {
			t.Fatalf("tick %d: no run with its id", tick)
		}
	}
	// Again on another leader, over a wider range: only the new ticks run.
	f.c.setLeader(1, true)
	list, err = f.leader().p.Schedule(ctxT(t), scheduleReq(&rpc.BackfillSchedule{Id: "bf", FromUnixMs: from - 60_000, ToUnixMs: to}))
	if err != nil || list.BackfillTicks != 6 || list.BackfillStarted != 1 {
		t.Fatalf("backfill repeated: %v, %v", list, err)
	}
	st := readSchedule(t, f.leader(), "bf")
	if st.Runs != 6 || st.LastTickUnixMs != to || len(st.Running) != 0 {
		t.Fatalf("runs %d last %d running %x, want 6, %d, none", st.Runs, st.LastTickUnixMs, st.Running, to)
	}
	for _, bad := range []*rpc.BackfillSchedule{
		{Id: "bf", FromUnixMs: now - 2000*60_000, ToUnixMs: now - 60_000}, // over the bound
		{Id: "bf", FromUnixMs: from, ToUnixMs: now + 60_000},              // into the future
		{Id: "bf", FromUnixMs: to, ToUnixMs: from},                        // backwards
	} {
		if _, err := f.leader().p.Schedule(ctxT(t), scheduleReq(bad)); !errors.Is(err, rpc.ErrInvalid) {
			t.Fatalf("backfill %d..%d: %v, want ErrInvalid", bad.FromUnixMs, bad.ToUnixMs, err)
		}
	}
	if _, err := f.leader().p.Schedule(ctxT(t), scheduleReq(&rpc.BackfillSchedule{Id: "nope", FromUnixMs: from, ToUnixMs: to})); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("backfill of an unknown schedule: %v", err)
	}
}

// leaderDispatch appends a keyed run at the fixture's leader: the one
// partition of these tests is every key's.
type leaderDispatch struct{ f *scheduleFixture }

func (d leaderDispatch) Append(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error) {
	return d.f.leader().p.Append(ctx, inv)
}

// A keyed target's runs are recorded by the tick and handed to the key's
// partition by the leader, across a leader change: one invocation per
// tick, with the key, in the key's queue; a workflow id template gives
// each tick its own workflow. A run handed over again is the same one.
func TestScheduleKeyedTargets(t *testing.T) {
	f := &scheduleFixture{t: t, clock: newManualClock(), svc: newRecordingService(t)}
	f.c = newFakeCluster(t, 3, func(_ int, cfg *Config) {
		cfg.Clock = f.clock.Now
		cfg.Services = staticServices{
			"Obj":  {Name: "Obj", Url: f.svc.srv.URL, Kind: rpc.Service_OBJECT},
			"Flow": {Name: "Flow", Url: f.svc.srv.URL, Kind: rpc.Service_WORKFLOW},
		}
		cfg.Dispatch = leaderDispatch{f}
	})
	f.c.setLeader(0, false)
	f.put(&rpc.ScheduleSpec{Id: "obj", Service: "Obj", Handler: "tick", Key: "k1", EveryMs: 1000, CatchupWindowMs: 60_000, Overlap: "allow-all"})
	f.put(&rpc.ScheduleSpec{Id: "flow", Service: "Flow", Handler: "run", Key: "signup-{tick}", WorkflowRun: true, EveryMs: 1000,
		CatchupWindowMs: 60_000, Overlap: "allow-all"})
	start := readSchedule(t, f.leader(), "obj").NextTickUnixMs
	var ticks []int64
	for i := range 4 {
		f.advance(time.Second)
		tick := start + int64(i)*1000
		ticks = append(ticks, tick)
		for _, id := range []string{"obj", "flow"} {
			f.waitState("tick recorded", id, func(st *rpc.ScheduleState) bool { return st.LastTickUnixMs == tick })
		}
		if i == 1 {
			f.c.setLeader(1, true)
		}
	}
	for _, id := range []string{"obj", "flow"} {
		st := f.waitState("runs handed over", id, func(st *rpc.ScheduleState) bool { return len(st.Dispatch) == 0 })
		if st.Runs != 4 || st.Skipped != 0 || len(st.Running) != 0 {
			t.Fatalf("%s: runs %d skipped %d running %x, want 4, 0, none", id, st.Runs, st.Skipped, st.Running)
		}
	}
	waitUntil(t, "every run delivered", func() bool { ids, _ := f.svc.total(); return ids == 8 })
	for _, tick := range ticks {
		at := time.UnixMilli(tick).UTC().Format(time.RFC3339Nano)
		for _, run := range []struct {
			schedule, key string
			id            invocation.ID
		}{
			{"obj", "k1", invocation.ScheduledKeyedRun("obj", tick, nil, "Obj", "k1")},
			{"flow", "signup-" + at, invocation.WorkflowRun("Flow", "signup-"+at)},
		} {
			f.svc.mu.Lock()
			h := f.svc.headers[run.id.String()]
			f.svc.mu.Unlock()
			if h.Get(headerKey) != run.key || h.Get(headerSchedule) != run.schedule || h.Get(headerScheduledTime) != at {
				t.Fatalf("tick %d of %s: run %s delivered with headers %v", tick, run.schedule, run.id, h)
			}
		}
	}
	// The first run handed over again (its acceptance lost, say): the
	// same invocation, nothing new is delivered.
	id := invocation.ScheduledKeyedRun("obj", ticks[0], nil, "Obj", "k1")
	before := f.svc.count(id)
	a, err := leaderDispatch{f}.Append(ctxT(t), &rpc.Invoke{InvocationId: id[:], RequestId: id[8:], Service: "Obj", Handler: "tick",
		Key: "k1", Exclusive: true, ScheduleId: "obj", ScheduledAtUnixMs: ticks[0]})
	if err != nil || a.CompletedAtUnixMs == 0 {
		t.Fatalf("handed over again: %v %v, want the completed run", a, err)
	}
	f.c.waitApplied()
	if ids, _ := f.svc.total(); ids != 8 || f.svc.count(id) != before {
		t.Fatalf("handed over again: %d invocations delivered, run delivered %d times (was %d)", ids, f.svc.count(id), before)
	}
	// A run of a service no longer registered is dropped and counted as
	// skipped.
	f.put(&rpc.ScheduleSpec{Id: "gone", Service: "Gone", Handler: "tick", Key: "k", EveryMs: 1000, CatchupWindowMs: 60_000, Overlap: "allow-all"})
	f.advance(time.Second)
	f.waitState("the run dropped", "gone", func(st *rpc.ScheduleState) bool { return st.Skipped == 1 && st.Runs == 0 && len(st.Dispatch) == 0 })
	// Once the last completions apply, every replica holds the same state.
	waitUntil(t, "replicas alike", func() bool {
		f.c.waitApplied()
		return f.c.replicas[0].dump(t) == f.c.replicas[2].dump(t)
	})
}
