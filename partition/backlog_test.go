package partition

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// A service's backlog counts what is in flight, what a limit holds, what
// waits for a retry and what is paused; the listing names the limit.
func TestBacklogCounts(t *testing.T) {
	blocking := newRecordingService(t)
	blocking.block = make(chan struct{})
	failing := newRecordingService(t)
	failing.answer = func(string, int, []byte) (int, http.Header, []byte) { return http.StatusInternalServerError, nil, nil }
	hour := time.Hour.Milliseconds()
	services := staticServices{
		"limited":  {Name: "limited", Url: blocking.srv.URL, Limits: &rpc.Limits{Concurrency: 3}},
		"retrying": {Name: "retrying", Url: failing.srv.URL, Retry: &rpc.RetryPolicy{MaxAttempts: 100, InitialBackoffMs: hour, MaxBackoffMs: hour}},
		"pausing":  {Name: "pausing", Url: failing.srv.URL, Retry: &rpc.RetryPolicy{MaxAttempts: 1, OnMaxAttempts: rpc.RetryPolicy_PAUSE}},
	}
	reg := prometheus.NewRegistry()
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Services = flowServices{staticServices: services}
		cfg.Registerer = reg
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	appendInvokes(t, p, 10, nil)
	for i := range 2 {
		if _, err := p.Append(ctxT(t), newInvoke("retrying", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Append(ctxT(t), newInvoke("pausing", 0)); err != nil {
		t.Fatal(err)
	}
	want := map[string]*rpc.ServiceBacklog{
		"limited":  {InFlight: 3, WaitingForLimit: 7},
		"retrying": {WaitingForRetry: 2},
		"pausing":  {Paused: 1},
	}
	got := map[string]*rpc.ServiceBacklog{}
	testutil.WaitFor(t, 10*time.Second, "the backlogs", func() bool {
		for name, w := range want {
			bl, err := p.Backlog(ctxT(t), name)
			if err != nil {
				t.Fatal(err)
			}
			got[name] = bl
			bl = proto.Clone(bl).(*rpc.ServiceBacklog)
			bl.AtUnixMs, bl.OldestWaitingDueUnixMs = 0, 0
			if !proto.Equal(bl, w) {
				return false
			}
		}
		return true
	})
	if bl := got["limited"]; bl.OldestWaitingDueUnixMs <= 0 || bl.OldestWaitingDueUnixMs > bl.AtUnixMs {
		t.Fatalf("oldest waiting due at %d, counted at %d", bl.OldestWaitingDueUnixMs, bl.AtUnixMs)
	}
	// The gauges say the same (oldest: due at least 0 s ago).
	gauges := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "service" {
					gauges[f.GetName()+"/"+l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	for name, want := range map[string]float64{
		"raftgate_service_in_flight/limited": 3, "raftgate_service_waiting_for_limit/limited": 7,
		"raftgate_service_waiting_for_retry/retrying": 2, "raftgate_service_paused/pausing": 1,
	} {
		if got, ok := gauges[name]; !ok || got != want {
			t.Errorf("%s = %v (reported: %v), want %v", name, got, ok, want)
		}
	}
	if _, ok := gauges["raftgate_service_oldest_waiting_seconds/limited"]; !ok {
		t.Error("no raftgate_service_oldest_waiting_seconds for limited")
	}
	list, err := p.List(ctxT(t), &rpc.ListInvocations{Service: "limited"})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int{}
	for _, rec := range list.Records {
		held[rpc.InvocationRecord_State_name[int32(rec.State)]+"/"+rec.HeldBy]++
	}
	if held["RUNNING/"] != 3 || held["PENDING/"+heldByService] != 7 {
		t.Fatalf("listing by state/heldBy: %v, want 3 running and 7 held by %q", held, heldByService)
	}
	close(blocking.block)
	testutil.WaitFor(t, 20*time.Second, "the limited backlog drained", func() bool {
		bl, err := p.Backlog(ctxT(t), "limited")
		return err == nil && bl.InFlight+bl.WaitingForLimit == 0
	})
}

// A backlog read stops at its bound and says so.
func TestBacklogWalkIsBounded(t *testing.T) {
	c, rs := limitedCluster(t, 1, &rpc.Service{Name: "limited"}, nil)
	c.setLeader(0, false)
	p := c.replicas[0].p
	appendInvokes(t, p, 5, nil)
	testutil.WaitFor(t, 10*time.Second, "five under way", func() bool { n, _, _ := rs.inFlight(); return n == 5 })
	defer close(rs.block)
	for _, tc := range []struct {
		limit     int
		truncated bool
	}{{5, false}, {4, true}} {
		t.Run(strconv.Itoa(tc.limit), func(t *testing.T) {
			if err := p.log.View(context.Background(), func(b *bolt.Bucket) error {
				_, truncated, err := countBacklogs(b, "limited", p.now().UnixMilli(), p.invoker.reserved, tc.limit)
				if truncated != tc.truncated {
					t.Errorf("walking at most %d of 5: truncated %v", tc.limit, truncated)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
