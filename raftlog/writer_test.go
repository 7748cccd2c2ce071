package raftlog

import (
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestPlanBatch checks what the writer's next commit carries: urgent work
// at once, lazy work with it or after lazyDelay, deferred work (followers'
// applies, compactions) only when due or when a later request of its group
// must not overtake it.
func TestPlanBatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g1, g2 := &Group{id: 1}, &Group{id: 2}
	appendReq := func(g *Group, at time.Duration) *writeReq {
		return &writeReq{g: g, append: &pb.Message{Entries: []*pb.Entry{{Index: new(uint64(5))}}}, queuedAt: t0.Add(at)}
	}
	lazyReq := func(g *Group, at time.Duration) *writeReq {
		return &writeReq{g: g, append: &pb.Message{Commit: new(uint64(4))}, lazy: true, queuedAt: t0.Add(at)}
	}
	deferredApply := func(g *Group, at time.Duration, bytes int) *writeReq {
		return &writeReq{g: g, apply: &pb.Message{Entries: []*pb.Entry{{Index: new(uint64(3))}}}, deferred: true, applyBytes: bytes, queuedAt: t0.Add(at)}
	}
	leaderApply := func(g *Group, at time.Duration) *writeReq {
		return &writeReq{g: g, apply: &pb.Message{Entries: []*pb.Entry{{Index: new(uint64(3))}}}, leaderApply: true, queuedAt: t0.Add(at)}
	}
	snapshot := func(g *Group, at time.Duration) *writeReq {
		return &writeReq{g: g, append: &pb.Message{Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(2))}}}, queuedAt: t0.Add(at)}
	}
	d1 := deferredApply(g1, 0, 100)
	d2 := deferredApply(g2, time.Millisecond, 100)
	a1, a2 := appendReq(g1, 2*time.Millisecond), appendReq(g2, 2*time.Millisecond)
	l1 := lazyReq(g1, time.Millisecond)
	la1, s2 := leaderApply(g1, 3*time.Millisecond), snapshot(g2, 3*time.Millisecond)
	big := deferredApply(g1, 0, deferBytes)

	for _, tc := range []struct {
		name       string
		queue      []*writeReq
		now        time.Duration
		linger     time.Duration // lingerUntil relative to t0; 0: none
		take, keep []*writeReq
		wakeAt     time.Duration // relative to t0; -1: none
	}{
		{name: "empty", wakeAt: -1},
		{name: "urgent goes at once without deferred", queue: []*writeReq{d1, a1, d2, a2}, now: 3 * time.Millisecond,
			take: []*writeReq{a1, a2}, keep: []*writeReq{d1, d2}, wakeAt: -1},
		{name: "lazy waits for lazyDelay", queue: []*writeReq{l1}, now: 2 * time.Millisecond,
			keep: []*writeReq{l1}, wakeAt: time.Millisecond + lazyDelay},
		{name: "lazy due", queue: []*writeReq{d1, l1}, now: time.Millisecond + lazyDelay,
			take: []*writeReq{l1}, keep: []*writeReq{d1}, wakeAt: -1},
		{name: "deferred alone waits for deferDelay", queue: []*writeReq{d1, d2}, now: 10 * time.Millisecond,
			keep: []*writeReq{d1, d2}, wakeAt: deferDelay},
		{name: "deferred due takes everything", queue: []*writeReq{d1, a1, d2}, now: deferDelay,
			take: []*writeReq{d1, a1, d2}, wakeAt: -1},
		{name: "deferred bytes make it due", queue: []*writeReq{big}, now: time.Millisecond,
			take: []*writeReq{big}, wakeAt: -1},
		{name: "a leader's apply takes its group's deferred work first", queue: []*writeReq{d1, d2, la1}, now: 4 * time.Millisecond,
			take: []*writeReq{d1, la1}, keep: []*writeReq{d2}, wakeAt: -1},
		{name: "a snapshot install takes its group's deferred work first", queue: []*writeReq{d1, d2, s2}, now: 4 * time.Millisecond,
			take: []*writeReq{d2, s2}, keep: []*writeReq{d1}, wakeAt: -1},
		{name: "linger holds an append", queue: []*writeReq{a1}, now: 3 * time.Millisecond, linger: 3*time.Millisecond + applyLinger,
			keep: []*writeReq{a1}, wakeAt: 3*time.Millisecond + applyLinger},
		{name: "a leader's apply ends the linger", queue: []*writeReq{a1, la1}, now: 3 * time.Millisecond, linger: 3*time.Millisecond + applyLinger,
			take: []*writeReq{a1, la1}, wakeAt: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var linger time.Time
			if tc.linger != 0 {
				linger = t0.Add(tc.linger)
			}
			take, keep, wakeAt := planBatch(tc.queue, t0.Add(tc.now), linger)
			if !slices.Equal(take, tc.take) {
				t.Errorf("take %v, want %v", names(take, tc.queue), names(tc.take, tc.queue))
			}
			if !slices.Equal(keep, tc.keep) {
				t.Errorf("keep %v, want %v", names(keep, tc.queue), names(tc.keep, tc.queue))
			}
			want := time.Time{}
			if tc.wakeAt >= 0 {
				want = t0.Add(tc.wakeAt)
			}
			if !wakeAt.Equal(want) {
				t.Errorf("wake at %v, want %v", wakeAt.Sub(t0), want.Sub(t0))
			}
		})
	}
}

// names shows requests by their position in the queue.
func names(rs, queue []*writeReq) []int {
	var out []int
	for _, r := range rs {
		out = append(out, slices.Index(queue, r))
	}
	return out
}
