package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// InvocationList is the JSON form of GET /invocations.
type InvocationList struct {
	Invocations []InvocationSummary `json:"invocations"`
	// NextCursor continues the listing (pass it as ?cursor= with the same
	// filters); absent when nothing older can match. A page may hold fewer
	// than limit invocations, even none, and still have a NextCursor: each
	// partition looks at a bounded number of entries per page.
	NextCursor string `json:"nextCursor,omitempty"`
	// Scanned is how many index entries the partitions looked at.
	Scanned int `json:"scanned"`
}

// InvocationSummary is one invocation in a listing: InvocationView
// without bodies.
type InvocationSummary struct {
	ID             string `json:"id"`
	Partition      uint32 `json:"partition"`
	Service        string `json:"service"`
	Handler        string `json:"handler"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// Key is the object key or workflow id of a keyed service's handler.
	Key string `json:"key,omitempty"`
	// Scope is the scope it was sent in (POST /restate/scope/{scope}/…).
	Scope string `json:"scope,omitempty"`
	// Priority is the send's x-raftgate-priority (omitted when 0).
	Priority int32 `json:"priority,omitempty"`
	// HeldBy, when pending, names the limit the partition leader's last
	// scan found full for it ("service concurrency", "scope rule …", …;
	// docs/api.md): the leader's soft state, not replicated.
	HeldBy        string `json:"heldBy,omitempty"`
	Status        string `json:"status"`
	Attempts      uint32 `json:"attempts"`
	LastError     string `json:"lastError,omitempty"`
	AcceptedAt    string `json:"acceptedAt,omitempty"`
	ExecutionTime string `json:"executionTime,omitempty"`
	CompletedAt   string `json:"completedAt,omitempty"`
	// ResultStatus and Failed describe the result once completed.
	ResultStatus uint32 `json:"resultStatus,omitempty"`
	Failed       bool   `json:"failed,omitempty"`
}

// Page sizes of GET /invocations (the partitions bound them too).
const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

var listStatuses = map[string]rpc.ListInvocations_Status{
	"":          rpc.ListInvocations_ANY,
	"pending":   rpc.ListInvocations_PENDING,
	"running":   rpc.ListInvocations_RUNNING,
	"completed": rpc.ListInvocations_COMPLETED,
	"failed":    rpc.ListInvocations_FAILED,
	"queued":    rpc.ListInvocations_QUEUED,
	"scheduled": rpc.ListInvocations_SCHEDULED,
	"paused":    rpc.ListInvocations_PAUSED,
}

// parseListQuery reads GET /invocations' parameters into one partition
// request; it names the bad parameter in its error.
func parseListQuery(q url.Values) (*rpc.ListInvocations, error) {
	status, ok := listStatuses[q.Get("status")]
	if !ok {
		return nil, fmt.Errorf("status %q: want pending, running, queued, scheduled, paused, completed or failed", q.Get("status"))
	}
	req := &rpc.ListInvocations{
		Status:         status,
		Service:        q.Get("service"),
		Handler:        q.Get("handler"),
		IdempotencyKey: q.Get("key"),
		Key:            q.Get("objectKey"),
		Limit:          defaultListLimit,
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 || n > maxListLimit {
			return nil, fmt.Errorf("limit %q: want 1..%d", s, maxListLimit)
		}
		req.Limit = uint32(n)
	}
	var err error
	if req.CreatedAfterUnixMs, err = parseTimeParam(q, "createdAfter"); err != nil {
		return nil, err
	}
	if req.CreatedBeforeUnixMs, err = parseTimeParam(q, "createdBefore"); err != nil {
		return nil, err
	}
	if s := q.Get("cursor"); s != "" {
		pos, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(pos) != rpc.ListPositionLen {
			return nil, fmt.Errorf("cursor %q: not a cursor from a previous page's nextCursor", s)
		}
		req.Before = pos
	}
	return req, nil
}

// parseTimeParam reads an RFC 3339 time or unix milliseconds; 0 if absent.
func parseTimeParam(q url.Values, name string) (int64, error) {
	s := q.Get(name)
	if s == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > 0 {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want an RFC 3339 time (2006-01-02T15:04:05Z) or unix milliseconds", name, s)
	}
	return t.UnixMilli(), nil
}

// listInvocations asks every partition's leader for a page and merges them
// newest first. Each partition stops after a bounded scan; the merged page
// holds only what is newer than the highest position any partition stopped
// at, so that the next page (which resumes below it on every partition)
// never shows something newer than this one did.
func (s *server) listInvocations(w http.ResponseWriter, r *http.Request) {
	req, err := parseListQuery(r.URL.Query())
	if err != nil {
		s.writeError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	pages, err := s.listPartitions(ctx, req)
	if err != nil {
		s.writeCallError(w, r, "list invocations", err)
		return
	}
	type item struct {
		pos []byte
		p   uint32
		rec *rpc.InvocationRecord
	}
	var items []item
	var frontier []byte
	out := InvocationList{Invocations: []InvocationSummary{}}
	for i, page := range pages {
		out.Scanned += int(page.GetScanned())
		for _, rec := range page.GetRecords() {
			pos := rpc.ListPosition(rec.GetAcceptedAtUnixMs(), rec.GetInvoke().GetInvocationId())
			items = append(items, item{pos: pos, p: uint32(i + 1), rec: rec})
		}
		if res := page.GetResume(); res != nil && bytes.Compare(res, frontier) > 0 {
			frontier = res
		}
	}
	items = slices.DeleteFunc(items, func(it item) bool { return bytes.Compare(it.pos, frontier) < 0 })
	slices.SortFunc(items, func(a, b item) int { return bytes.Compare(b.pos, a.pos) })
	cursor := frontier
	if len(items) > int(req.Limit) {
		items = items[:req.Limit]
		cursor = items[len(items)-1].pos
	}
	for _, it := range items {
		out.Invocations = append(out.Invocations, invocationSummary(it.p, it.rec))
	}
	if cursor != nil {
		out.NextCursor = base64.RawURLEncoding.EncodeToString(cursor)
	}
	writeJSON(w, http.StatusOK, out)
}

// listPartitions calls every partition at once; one failure fails all (a
// listing with a partition missing would look complete and not be).
func (s *server) listPartitions(ctx context.Context, req *rpc.ListInvocations) ([]*rpc.InvocationList, error) {
	n := s.cfg.Partitions
	pages := make([]*rpc.InvocationList, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			pages[i], errs[i] = s.cfg.Invocations.List(ctx, i+1, req)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", i+1, err)
		}
	}
	return pages, nil
}

func invocationSummary(p uint32, rec *rpc.InvocationRecord) InvocationSummary {
	inv := rec.GetInvoke()
	id, _ := invocation.IDFromBytes(inv.GetInvocationId()) // 24 bytes: the partition checked them
	sum := InvocationSummary{
		ID:             id.String(),
		Partition:      p,
		Service:        inv.GetService(),
		Handler:        inv.GetHandler(),
		IdempotencyKey: inv.GetIdempotencyKey(),
		Key:            inv.GetKey(),
		Scope:          inv.GetScope(),
		Priority:       inv.GetPriority(),
		HeldBy:         rec.GetHeldBy(),
		Status:         stateName(rec.GetState()),
		Attempts:       rec.GetAttempts(),
		LastError:      rec.GetLastError(),
		AcceptedAt:     optionalTime(rec.GetAcceptedAtUnixMs()),
		ExecutionTime:  optionalTime(inv.GetNotBeforeUnixMs()),
		CompletedAt:    optionalTime(rec.GetCompletedAtUnixMs()),
	}
	if res := rec.GetResult(); res != nil {
		sum.ResultStatus, sum.Failed = res.GetStatus(), res.GetFailed()
		sum.Attempts = max(sum.Attempts, res.GetAttempts())
	}
	return sum
}
