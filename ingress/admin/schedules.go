package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// Schedules reaches the leader of a schedule's partition (through the
// dispatch client); errors as for Invocations.
type Schedules interface {
	// Schedule changes or reads schedules (rpc.ScheduleRequest); a change
	// returns once applied.
	Schedule(ctx context.Context, partition uint32, req *rpc.ScheduleRequest) (*rpc.ScheduleList, error)
}

// ScheduleRequest is the body of PUT /schedules/{id} (docs/api.md,
// "Schedules").
type ScheduleRequest struct {
	// Target is "Service/handler", or "Object/key/handler" for a keyed
	// service (an object or a workflow), where {tick} in the key stands
	// for the tick's time (RFC 3339 UTC): "Signup/{tick}/run".
	Target string `json:"target"`
	// Body is the JSON each run is sent (content-type application/json);
	// none sends an empty body.
	Body json.RawMessage `json:"body,omitempty"`
	// Exactly one of Every (a Go duration, at least 1s, or an ISO 8601
	// repeating interval: R/PT5M, R5/2026-12-01T00:00:00Z/PT1H) and Cron.
	Every    string `json:"every,omitempty"`
	Cron     string `json:"cron,omitempty"`
	TimeZone string `json:"timeZone,omitempty"`
	// Overlap: skip (default), buffer-one or allow-all.
	Overlap string `json:"overlap,omitempty"`
	// CatchupWindow: ticks due longer ago than this are skipped and
	// counted (default 1h).
	CatchupWindow string `json:"catchupWindow,omitempty"`
	// Jitter delays each tick by up to this much (default none).
	Jitter string `json:"jitter,omitempty"`
	Paused bool   `json:"paused,omitempty"`
	// Start and End (RFC 3339) bound the ticks, both included.
	Start string `json:"start,omitempty"`
	End   string `json:"end,omitempty"`
}

// BackfillRequest is the body of POST /schedules/{id}/backfill: a past
// range (RFC 3339), both ends included.
type BackfillRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// BackfillView is what a backfill did: the range's ticks, and the runs it
// started (ticks that had none yet).
type BackfillView struct {
	Ticks   uint64 `json:"ticks"`
	Started uint64 `json:"started"`
}

// maxScheduleKeyLen bounds a keyed target's key, {tick} expanded or not
// (the ingress's bound on object keys).
const maxScheduleKeyLen = 1000

// DefaultCatchupWindow is a schedule's catch-up window when none is given:
// long enough that a nightly run survives an hour's outage.
const DefaultCatchupWindow = time.Hour

// maxScheduleBody bounds PUT /schedules/{id} bodies.
const maxScheduleBody = 1 << 20

// ScheduleView is the JSON form of a schedule.
type ScheduleView struct {
	ID            string          `json:"id"`
	Partition     uint32          `json:"partition"`
	Target        string          `json:"target"`
	Body          json.RawMessage `json:"body,omitempty"`
	Every         string          `json:"every,omitempty"`
	Cron          string          `json:"cron,omitempty"`
	TimeZone      string          `json:"timeZone,omitempty"`
	Overlap       string          `json:"overlap"`
	CatchupWindow string          `json:"catchupWindow"`
	Jitter        string          `json:"jitter,omitempty"`
	Paused        bool            `json:"paused"`
	Start         string          `json:"start,omitempty"`
	End           string          `json:"end,omitempty"`
	// Ended: the schedule has no tick to come (past its end, or its
	// repeating interval's count).
	Ended bool `json:"ended,omitempty"`
	// NextRun is the next tick (RFC 3339), omitted when there is none.
	NextRun string `json:"nextRun,omitempty"`
	// LastRun is the last tick that started a run, and its invocation.
	LastRun          string `json:"lastRun,omitempty"`
	LastInvocationID string `json:"lastInvocationId,omitempty"`
	// Running is the run under way that the overlap policy waits for.
	Running string `json:"running,omitempty"`
	// Buffered is a tick waiting for Running (buffer-one).
	Buffered string `json:"buffered,omitempty"`
	// Dispatching counts a keyed target's runs not yet accepted by their
	// key's partition.
	Dispatching int    `json:"dispatching,omitempty"`
	Runs        uint64 `json:"runs"`
	Skipped     uint64 `json:"skipped"`
	// TriggeredInvocationID: the run POST …/trigger started.
	TriggeredInvocationID string `json:"triggeredInvocationId,omitempty"`
	// Backfill: what POST …/backfill did.
	Backfill  *BackfillView `json:"backfill,omitempty"`
	CreatedAt string        `json:"createdAt,omitempty"`
	UpdatedAt string        `json:"updatedAt,omitempty"`
}

// ScheduleList is the JSON form of GET /schedules.
type ScheduleList struct {
	Schedules []ScheduleView `json:"schedules"`
}

func (s *server) schedulePartition(id string) uint32 {
	return invocation.PartitionFor(invocation.SchedulePartitionKey(id), s.cfg.Partitions)
}

func (s *server) putSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req ScheduleRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxScheduleBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New(`body must be JSON like {"target": "Service/handler", "every": "5m"}`)
		}
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("schedule %q: %v", id, err))
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	spec, status, err := s.scheduleSpec(ctx, id, req)
	if err != nil {
		s.writeError(w, r, status, fmt.Sprintf("schedule %q: %v", id, err))
		return
	}
	s.scheduleCall(w, r, id, &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Put{Put: &rpc.PutSchedule{Spec: spec, RequestId: invocation.NewRequestID()}}})
}

// scheduleSpec checks a request and builds its spec; the status is the
// answer's for the error.
func (s *server) scheduleSpec(ctx context.Context, id string, req ScheduleRequest) (*rpc.ScheduleSpec, int, error) {
	if id == "" || len(id) > 200 || strings.ContainsAny(id, "/\x00") {
		return nil, http.StatusBadRequest, errors.New("an id is 1 to 200 characters without '/'")
	}
	parts := strings.Split(req.Target, "/")
	if len(parts) < 2 || len(parts) > 3 || slices.Contains(parts, "") {
		return nil, http.StatusBadRequest, fmt.Errorf("target %q: want Service/handler, or Object/key/handler for a keyed service", req.Target)
	}
	service, handler, key := parts[0], parts[len(parts)-1], ""
	if len(parts) == 3 {
		key = parts[1]
	}
	if err := s.cfg.Registry.CatchUp(ctx); err != nil {
		return nil, http.StatusServiceUnavailable, fmt.Errorf("service registry not readable: %v", err)
	}
	svc, ok := s.cfg.Registry.Lookup(service)
	keyed := ok && svc.Kind != rpc.Service_SERVICE
	switch {
	case !ok:
		return nil, http.StatusNotFound, fmt.Errorf("service %q is not registered", service)
	case len(svc.Handlers) > 0 && !slices.Contains(svc.Handlers, handler):
		return nil, http.StatusNotFound, fmt.Errorf("service %q has no handler %q", service, handler)
	case keyed && key == "":
		return nil, http.StatusBadRequest, fmt.Errorf("service %q is keyed: target %s/KEY/%s (an object key, or a workflow id like {tick})", service, service, handler)
	case !keyed && key != "":
		return nil, http.StatusBadRequest, fmt.Errorf("service %q is not keyed: target %s/%s", service, service, handler)
	case len(key) > maxScheduleKeyLen:
		return nil, http.StatusBadRequest, fmt.Errorf("the key is longer than %d bytes", maxScheduleKeyLen)
	case keyed && req.Overlap != "" && req.Overlap != "allow-all":
		return nil, http.StatusBadRequest, fmt.Errorf("overlap %q: a keyed target's runs wait in their key's queue, so its overlap is allow-all", req.Overlap)
	}
	if keyed {
		req.Overlap = "allow-all"
	}
	spec := &rpc.ScheduleSpec{Id: id, Service: service, Handler: handler, Key: key, Cron: req.Cron, TimeZone: req.TimeZone,
		Overlap: req.Overlap, Paused: req.Paused, CatchupWindowMs: DefaultCatchupWindow.Milliseconds(),
		WorkflowRun: svc.Kind == rpc.Service_WORKFLOW && handler == registry.WorkflowRun}
	if len(req.Body) > 0 {
		spec.Body, spec.ContentType = req.Body, "application/json"
	}
	every := req.Every
	if strings.HasPrefix(every, "R") {
		spec.Repeat, every = every, ""
	}
	for _, t := range []struct {
		name, value string
		dst         *int64
	}{{"start", req.Start, &spec.StartUnixMs}, {"end", req.End, &spec.EndUnixMs}} {
		ms, err := rfc3339Ms(t.name, t.value)
		if err != nil {
			return nil, http.StatusBadRequest, err
		}
		*t.dst = ms
	}
	for _, d := range []struct {
		name, value string
		dst         *int64
	}{{"every", every, &spec.EveryMs}, {"catchupWindow", req.CatchupWindow, &spec.CatchupWindowMs}, {"jitter", req.Jitter, &spec.JitterMs}} {
		if d.value == "" {
			continue
		}
		v, err := time.ParseDuration(d.value)
		if err != nil || v < 0 {
			want := "a Go duration like 5m"
			if d.name == "every" {
				want += " or an ISO 8601 repeating interval like R/PT5M"
			}
			return nil, http.StatusBadRequest, fmt.Errorf("%s %q: want %s", d.name, d.value, want)
		}
		*d.dst = v.Milliseconds()
	}
	return spec, 0, nil
}

// rfc3339Ms reads an optional RFC 3339 time as unix ms (0 when empty).
func rfc3339Ms(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.UnixMilli() <= 0 {
		return 0, fmt.Errorf("%s %q: want an RFC 3339 time like 2026-12-01T00:00:00Z", name, v)
	}
	return t.UnixMilli(), nil
}

func (s *server) listSchedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.callContext(r)
	defer cancel()
	out := ScheduleList{Schedules: []ScheduleView{}}
	for p := uint32(1); p <= s.cfg.Partitions; p++ {
		list, err := s.cfg.Schedules.Schedule(ctx, p, &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_List{List: true}})
		if err != nil {
			s.writeCallError(w, r, fmt.Sprintf("list schedules of partition %d", p), err)
			return
		}
		for _, st := range list.Schedules {
			out.Schedules = append(out.Schedules, scheduleView(p, st))
		}
	}
	slices.SortFunc(out.Schedules, func(a, b ScheduleView) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, out)
}

func (s *server) getSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.scheduleCall(w, r, id, &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Get{Get: id}})
}

func (s *server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := s.callContext(r)
	defer cancel()
	req := &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Delete{Delete: &rpc.DeleteSchedule{Id: id, RequestId: invocation.NewRequestID()}}}
	if _, err := s.cfg.Schedules.Schedule(ctx, s.schedulePartition(id), req); err != nil {
		s.writeCallError(w, r, fmt.Sprintf("schedule %q", id), err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// scheduleAction serves POST /schedules/{id}/pause|resume|trigger|backfill.
func (s *server) scheduleAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	var req *rpc.ScheduleRequest
	switch action {
	case "backfill":
		if r.Method != http.MethodPost {
			break // answered below
		}
		var body BackfillRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxScheduleBody))
		dec.DisallowUnknownFields()
		err := dec.Decode(&body)
		from, ferr := rfc3339Ms("from", body.From)
		to, terr := rfc3339Ms("to", body.To)
		if err = errors.Join(err, ferr, terr); err != nil || from == 0 || to == 0 {
			s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf(`backfill of schedule %q: want a body like {"from":"2026-12-01T00:00:00Z","to":"2026-12-02T00:00:00Z"} (%v)`, id, err))
			return
		}
		req = &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Backfill{Backfill: &rpc.BackfillSchedule{Id: id, FromUnixMs: from, ToUnixMs: to, RequestId: invocation.NewRequestID()}}}
	case "pause", "resume":
		req = &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Pause{Pause: &rpc.PauseSchedule{Id: id, Paused: action == "pause", RequestId: invocation.NewRequestID()}}}
	case "trigger":
		req = &rpc.ScheduleRequest{Op: &rpc.ScheduleRequest_Trigger{Trigger: &rpc.TriggerSchedule{Id: id, RequestId: invocation.NewRequestID()}}}
	default:
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("no schedule action %q (pause, resume, trigger or backfill)", action))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.writeError(w, r, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use POST", r.Method, r.URL.Path))
		return
	}
	s.scheduleCall(w, r, id, req)
}

// scheduleCall sends req to schedule id's partition and answers with the
// schedule.
func (s *server) scheduleCall(w http.ResponseWriter, r *http.Request, id string, req *rpc.ScheduleRequest) {
	ctx, cancel := s.callContext(r)
	defer cancel()
	p := s.schedulePartition(id)
	list, err := s.cfg.Schedules.Schedule(ctx, p, req)
	if err != nil {
		s.writeCallError(w, r, fmt.Sprintf("schedule %q", id), err)
		return
	}
	if len(list.Schedules) == 0 {
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("schedule %q not found", id))
		return
	}
	v := scheduleView(p, list.Schedules[0])
	if len(list.Triggered) > 0 {
		v.TriggeredInvocationID = invocationIDText(list.Triggered)
	}
	if _, ok := req.Op.(*rpc.ScheduleRequest_Backfill); ok {
		v.Backfill = &BackfillView{Ticks: list.BackfillTicks, Started: list.BackfillStarted}
	}
	writeJSON(w, http.StatusOK, v)
}

func scheduleView(p uint32, st *rpc.ScheduleState) ScheduleView {
	spec := st.GetSpec()
	target := spec.GetService() + "/" + spec.GetHandler()
	if spec.GetKey() != "" {
		target = spec.GetService() + "/" + spec.GetKey() + "/" + spec.GetHandler()
	}
	v := ScheduleView{ID: spec.GetId(), Partition: p, Target: target, Dispatching: len(st.Dispatch),
		Cron: spec.GetCron(), TimeZone: spec.GetTimeZone(), Overlap: spec.GetOverlap(),
		CatchupWindow: msText(spec.GetCatchupWindowMs()), Paused: spec.GetPaused(),
		NextRun: timeText(st.NextTickUnixMs), LastRun: timeText(st.LastTickUnixMs),
		Buffered: timeText(st.BufferedTickUnixMs), Runs: st.Runs, Skipped: st.Skipped,
		CreatedAt: timeText(st.CreatedAtUnixMs), UpdatedAt: timeText(st.UpdatedAtUnixMs)}
	if v.Overlap == "" {
		v.Overlap = "skip"
	}
	v.Every, v.Jitter = msText(spec.GetEveryMs()), msText(spec.GetJitterMs())
	if spec.GetRepeat() != "" {
		v.Every = spec.GetRepeat()
	}
	v.Start, v.End = timeText(spec.GetStartUnixMs()), timeText(spec.GetEndUnixMs())
	v.Ended = st.NextTickUnixMs == 0 && !spec.GetPaused()
	if len(spec.GetBody()) > 0 && json.Valid(spec.GetBody()) {
		v.Body = spec.GetBody()
	}
	if len(st.LastInvocationId) > 0 {
		v.LastInvocationID = invocationIDText(st.LastInvocationId)
	}
	if len(st.Running) > 0 {
		v.Running = invocationIDText(st.Running)
	}
	return v
}

// timeText is RFC 3339 in UTC, empty for 0.
func timeText(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

func invocationIDText(b []byte) string {
	id, err := invocation.IDFromBytes(b)
	if err != nil {
		return fmt.Sprintf("%x", b)
	}
	return id.String()
}
