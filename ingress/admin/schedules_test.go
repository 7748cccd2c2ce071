package admin

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/rpc"
)

// recordedSchedules keeps the last schedule request and answers with the
// schedule it puts.
type recordedSchedules struct {
	mu   sync.Mutex
	last *rpc.ScheduleRequest
}

func (r *recordedSchedules) Schedule(ctx context.Context, partition uint32, req *rpc.ScheduleRequest) (*rpc.ScheduleList, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = req
	if put := req.GetPut(); put != nil {
		return &rpc.ScheduleList{Schedules: []*rpc.ScheduleState{{Spec: put.Spec}}}, nil
	}
	return &rpc.ScheduleList{Schedules: []*rpc.ScheduleState{{Spec: &rpc.ScheduleSpec{Id: "s", Service: "Svc", Handler: "h"}}},
		BackfillTicks: 3, BackfillStarted: 2}, nil
}

func ms(t *testing.T, rfc3339 string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

// PUT /schedules/{id} reads keyed targets, repeating intervals, start and
// end into the spec, and refuses what cannot be scheduled.
func TestPutScheduleSpec(t *testing.T) {
	rec := &recordedSchedules{}
	f := newFixture(t, func(c *Config) { c.Schedules = rec })
	f.registry.services["Svc"] = &rpc.Service{Name: "Svc", Kind: rpc.Service_SERVICE}
	f.registry.services["Obj"] = &rpc.Service{Name: "Obj", Kind: rpc.Service_OBJECT}
	f.registry.services["Flow"] = &rpc.Service{Name: "Flow", Kind: rpc.Service_WORKFLOW}
	spec := func() *rpc.ScheduleSpec {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.last.GetPut().GetSpec()
	}

	a := f.do(t, "PUT", "/schedules/s", `{"target":"Obj/k1/add","every":"R5/2026-12-01T00:00:00Z/PT1H","start":"2026-12-01T00:00:00Z","end":"2026-12-02T00:00:00Z"}`)
	if s := spec(); a.status != http.StatusOK || s.Key != "k1" || s.Handler != "add" || s.Repeat != "R5/2026-12-01T00:00:00Z/PT1H" ||
		s.EveryMs != 0 || s.StartUnixMs != ms(t, "2026-12-01T00:00:00Z") || s.EndUnixMs != ms(t, "2026-12-02T00:00:00Z") || s.Overlap != "allow-all" || s.WorkflowRun {
		t.Fatalf("keyed put: %d %s, spec %v", a.status, a.body, s)
	}
	if v := decode[ScheduleView](t, a); v.Target != "Obj/k1/add" || v.Every != "R5/2026-12-01T00:00:00Z/PT1H" || v.Start != "2026-12-01T00:00:00Z" {
		t.Fatalf("view %+v", v)
	}
	if a = f.do(t, "PUT", "/schedules/w", `{"target":"Flow/{tick}/run","every":"1h"}`); a.status != http.StatusOK || !spec().WorkflowRun || spec().Key != "{tick}" {
		t.Fatalf("workflow put: %d %s, spec %v", a.status, a.body, spec())
	}
	for _, c := range []struct{ body, want string }{
		{`{"target":"Obj/add","every":"1m"}`, "is keyed"},
		{`{"target":"Svc/k/h","every":"1m"}`, "is not keyed"},
		{`{"target":"Obj/k/add","every":"1m","overlap":"skip"}`, "allow-all"},
		{`{"target":"Obj//add","every":"1m"}`, "want Service/handler"},
		{`{"target":"Svc/h","every":"1m","start":"tomorrow"}`, "start"},
		{`{"target":"Svc/h","every":"P5M"}`, "R/PT5M"},
	} {
		wantError(t, f.do(t, "PUT", "/schedules/s", c.body), http.StatusBadRequest, c.want)
	}

	a = f.do(t, "POST", "/schedules/s/backfill", `{"from":"2026-11-01T00:00:00Z","to":"2026-11-02T00:00:00Z"}`)
	rec.mu.Lock()
	bf := rec.last.GetBackfill()
	rec.mu.Unlock()
	if v := decode[ScheduleView](t, a); a.status != http.StatusOK || bf.FromUnixMs != ms(t, "2026-11-01T00:00:00Z") || bf.ToUnixMs != ms(t, "2026-11-02T00:00:00Z") ||
		v.Backfill == nil || v.Backfill.Ticks != 3 || v.Backfill.Started != 2 {
		t.Fatalf("backfill: %d %s, request %v", a.status, a.body, bf)
	}
	wantError(t, f.do(t, "POST", "/schedules/s/backfill", `{"from":"2026-11-01T00:00:00Z"}`), http.StatusBadRequest, "want a body like")
	wantError(t, f.do(t, "GET", "/schedules/s/backfill", ""), http.StatusMethodNotAllowed, "use POST")
}
