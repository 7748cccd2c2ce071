package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/rpc"
)

// TestServiceLimits: limits, handlerConfig and perKeyConcurrency are
// stored as given, shown by GET, and refused with a 400 naming the field.
func TestServiceLimits(t *testing.T) {
	f := newFixture(t, nil)
	a := f.do(t, "PUT", "/services/Shop", `{"url":"http://127.0.0.1:1","kind":"object","shared":["get"],
		"limits":{"concurrency":3,"ratePerSecond":50,"burst":10},"perKeyConcurrency":2,
		"handlerConfig":{"checkout":{"limits":{"concurrency":1},"retry":{"maxAttempts":2}},"get":{"limits":{"ratePerSecond":5.5}}}}`)
	if a.status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	svc := f.registry.services["Shop"]
	if l := svc.GetLimits(); l.GetConcurrency() != 3 || l.GetRatePerSecond() != 50 || l.GetBurst() != 10 || svc.GetPerKeyConcurrency() != 2 {
		t.Fatalf("stored %v", svc)
	}
	hcs := svc.GetHandlerConfig() // sorted by handler: checkout, get
	if len(hcs) != 2 || hcs[0].GetHandler() != "checkout" || hcs[0].GetLimits().GetConcurrency() != 1 || hcs[0].GetRetry().GetMaxAttempts() != 2 {
		t.Fatalf("stored handler configs %v", hcs)
	}
	v := decode[ServiceView](t, f.do(t, "GET", "/services/Shop", ""))
	if v.Limits == nil || *v.Limits != (LimitsView{Concurrency: 3, RatePerSecond: 50, Burst: 10}) || v.PerKeyConcurrency != 2 ||
		v.HandlerConfig["get"].Limits.RatePerSecond != 5.5 || v.HandlerConfig["checkout"].Retry.MaxAttempts != 2 {
		t.Fatalf("GET shows %+v", v)
	}
	for _, tc := range []struct{ body, msg string }{
		{`{"url":"http://h","limits":{}}`, "limits is empty"},
		{`{"url":"http://h","limits":{"concurrency":-1}}`, "cannot unmarshal"},
		{`{"url":"http://h","limits":{"ratePerSecond":-1}}`, "limits.ratePerSecond -1"},
		{`{"url":"http://h","limits":{"concurrency":2,"burst":5}}`, "limits.burst 5 needs a ratePerSecond"},
		{`{"url":"http://h","limits":{"concurrency":2000000}}`, "limits.concurrency 2000000 is above"},
		{`{"url":"http://h","limits":{"max":1}}`, "unknown field"},
		{`{"url":"http://h","handlers":["a"],"handlerConfig":{"b":{"limits":{"concurrency":1}}}}`, `handler "b" is not in handlers`},
		{`{"url":"http://h","handlerConfig":{"a":{}}}`, "handlerConfig.a is empty"},
		{`{"url":"http://h","handlerConfig":{"a":{"retry":{"maxAttempts":0}}}}`, "handlerConfig.a.retry.maxAttempts 0"},
		{`{"url":"http://h","handlerConfig":{"a-b":{"limits":{"concurrency":1}}}}`, "handler name"},
		{`{"url":"http://h","perKeyConcurrency":2}`, "a plain service has no keys"},
		{`{"url":"http://h","kind":"object","perKeyConcurrency":2}`, "has none"},
	} {
		wantError(t, f.do(t, "PUT", "/services/Bad", tc.body), http.StatusBadRequest, tc.msg)
	}
}

// failingBacklogs answers partition 1 and fails the others.
type failingBacklogs struct{}

func (failingBacklogs) Backlog(_ context.Context, p uint32, _ string) (*rpc.ServiceBacklog, error) {
	if p == 1 {
		return &rpc.ServiceBacklog{InFlight: 1}, nil
	}
	return nil, rpc.ErrUnavailable
}

// GET /services/{name} sums the partitions' backlogs, the oldest wait by
// each leader's clock; when one does not answer it still shows the
// registration, with backlogError instead of a partial sum.
func TestServiceBacklog(t *testing.T) {
	bl := map[uint32]*rpc.ServiceBacklog{
		1: {InFlight: 2, WaitingForLimit: 5, WaitingForRetry: 1, OldestWaitingDueUnixMs: 1_000, AtUnixMs: 2_500},
		2: {InFlight: 1, WaitingForLimit: 1, Paused: 4, Truncated: true, OldestWaitingDueUnixMs: 9_000, AtUnixMs: 9_100},
	}
	for _, tc := range []struct {
		name     string
		backlogs Backlogs
		want     *BacklogView
		err      string
	}{
		{"summed", partitionBacklogs(bl), &BacklogView{InFlight: 3, WaitingForLimit: 6, WaitingForRetry: 1, Paused: 4,
			OldestWaitingAge: "1.5s", OldestWaitingAgeMs: 1500, Truncated: true}, ""},
		{"a partition missing", failingBacklogs{}, nil, "partition 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Backlogs = tc.backlogs })
			f.registry.services["Shop"] = &rpc.Service{Name: "Shop", Url: "http://127.0.0.1:1"}
			a := f.do(t, "GET", "/services/Shop", "")
			if a.status != http.StatusOK {
				t.Fatalf("GET: %d %s", a.status, a.body)
			}
			v := decode[ServiceView](t, a)
			if (tc.want == nil) != (v.Backlog == nil) || (tc.want != nil && *v.Backlog != *tc.want) || !strings.Contains(v.BacklogError, tc.err) ||
				(tc.err == "") != (v.BacklogError == "") {
				t.Fatalf("backlog %+v, error %q; want %+v, error with %q", v.Backlog, v.BacklogError, tc.want, tc.err)
			}
		})
	}
}
