package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// Lifecycle reaches partition leaders for operators' actions (through the
// dispatch client); errors as for Invocations, plus rpc.ErrConflict when
// an action does not apply to the invocation's state.
type Lifecycle interface {
	// Action applies one action and returns once it applied; restart
	// answers the new invocation's id.
	Action(ctx context.Context, partition uint32, a *rpc.InvocationAction) (*rpc.Appended, error)
	// Bulk starts (or dry-runs) a bulk operation on one partition.
	Bulk(ctx context.Context, partition uint32, req *rpc.BulkRequest) (*rpc.Operation, error)
	// Operation reads one partition's state of a bulk operation.
	Operation(ctx context.Context, partition uint32, id string) (*rpc.Operation, error)
}

var actionKinds = map[string]rpc.InvocationAction_Kind{
	"resume":  rpc.InvocationAction_RESUME,
	"restart": rpc.InvocationAction_RESTART,
	"kill":    rpc.InvocationAction_KILL,
	"purge":   rpc.InvocationAction_PURGE,
}

// resumeRequest is the optional body of POST /invocations/{id}/resume.
type resumeRequest struct {
	// URL, when set, replaces the service's registered URL for this
	// invocation's deliveries from now on.
	URL string `json:"url"`
}

// maxActionBody bounds the body of an action or bulk request.
const maxActionBody = 64 << 10

// invocationAction serves POST /invocations/{id}/{action}: it answers the
// invocation's status after the action (restart: the new invocation's;
// purge: {"id","purged":true}).
func (s *server) invocationAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("action")
	kind, ok := actionKinds[name]
	if !ok {
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("no action %q: want resume, restart, kill or purge", name))
		return
	}
	id, p, ok := s.parseInvocationID(w, r)
	if !ok {
		return
	}
	a := &rpc.InvocationAction{Kind: kind, InvocationId: id.Bytes()}
	if kind == rpc.InvocationAction_RESUME {
		var body resumeRequest
		if err := readOptionalJSON(r, &body); err != nil {
			s.writeError(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if body.URL != "" {
			if u, err := url.Parse(body.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("url %q: want an absolute http(s) URL", body.URL))
				return
			}
		}
		a.Url = body.URL
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	appended, err := s.cfg.Lifecycle.Action(ctx, p, a)
	if err != nil {
		s.writeCallError(w, r, fmt.Sprintf("%s invocation %s", name, id), err)
		return
	}
	if kind == rpc.InvocationAction_PURGE {
		writeJSON(w, http.StatusOK, map[string]any{"id": id.String(), "purged": true})
		return
	}
	show := id
	if kind == rpc.InvocationAction_RESTART {
		if show, err = invocation.IDFromBytes(appended.GetInvocationId()); err != nil {
			s.writeCallError(w, r, "restart", fmt.Errorf("new id: %w", err))
			return
		}
	}
	rec, err := s.cfg.Invocations.Status(ctx, p, show.Bytes())
	if err != nil {
		// The action applied; only its status could not be read.
		s.log.Debug().Err(err).Str("invocation", show.String()).Msg("status after action unavailable")
		writeJSON(w, http.StatusAccepted, InvocationView{ID: show.String(), Partition: p})
		return
	}
	v := invocationView(show, p, rec, false)
	v.Leader = s.leaderOf(p)
	writeJSON(w, http.StatusOK, v)
}

func readOptionalJSON(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
	if err != nil {
		return fmt.Errorf("reading body: %v", err)
	}
	if len(data) > maxActionBody {
		return fmt.Errorf("body over %d bytes", maxActionBody)
	}
	if strings.TrimSpace(string(data)) == "" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %v", err)
	}
	return nil
}

// BulkRequest is the body of POST /invocations/bulk.
type BulkRequest struct {
	// Action is cancel, kill, pause, resume or purge.
	Action string `json:"action"`
	// Filter takes the listing's parameters (GET /invocations).
	Filter BulkFilter `json:"filter"`
	// DryRun only counts the invocations the action would change.
	DryRun bool `json:"dryRun"`
}

// BulkFilter is GET /invocations' filter as JSON: status, service,
// handler, key (idempotency key), objectKey, createdAfter, createdBefore
// (RFC 3339 or unix ms).
type BulkFilter struct {
	Status        string `json:"status,omitempty"`
	Service       string `json:"service,omitempty"`
	Handler       string `json:"handler,omitempty"`
	Key           string `json:"key,omitempty"`
	ObjectKey     string `json:"objectKey,omitempty"`
	CreatedAfter  string `json:"createdAfter,omitempty"`
	CreatedBefore string `json:"createdBefore,omitempty"`
}

var bulkActions = map[string]rpc.BulkAction{
	"cancel": rpc.BulkAction_BULK_CANCEL,
	"kill":   rpc.BulkAction_BULK_KILL,
	"pause":  rpc.BulkAction_BULK_PAUSE,
	"resume": rpc.BulkAction_BULK_RESUME,
	"purge":  rpc.BulkAction_BULK_PURGE,
}

func bulkActionName(a rpc.BulkAction) string {
	for name, v := range bulkActions {
		if v == a {
			return name
		}
	}
	return "unknown"
}

// BulkAnswer is the answer of POST /invocations/bulk.
type BulkAnswer struct {
	// Operation is empty for a dry run.
	Operation string `json:"operation,omitempty"`
	// Matched counts the invocations the action applies to: those that
	// matched when its command applied on each partition (a dry run: now).
	Matched uint64 `json:"matched"`
	DryRun  bool   `json:"dryRun,omitempty"`
}

// bulkInvocations serves POST /invocations/bulk: one Bulk command per
// partition, carrying the filter (never a list of ids), all with the same
// operation id.
func (s *server) bulkInvocations(w http.ResponseWriter, r *http.Request) {
	var body BulkRequest
	if err := readOptionalJSON(r, &body); err != nil {
		s.writeError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	action, ok := bulkActions[body.Action]
	if !ok {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("action %q: want cancel, kill, pause, resume or purge", body.Action))
		return
	}
	q := url.Values{}
	for k, v := range map[string]string{"status": body.Filter.Status, "service": body.Filter.Service, "handler": body.Filter.Handler,
		"key": body.Filter.Key, "objectKey": body.Filter.ObjectKey, "createdAfter": body.Filter.CreatedAfter, "createdBefore": body.Filter.CreatedBefore} {
		if v != "" {
			q.Set(k, v)
		}
	}
	filter, err := parseListQuery(q)
	if err != nil {
		s.writeError(w, r, http.StatusBadRequest, "filter: "+err.Error())
		return
	}
	filter.Limit = 0
	req := &rpc.BulkRequest{Action: action, Filter: filter, DryRun: body.DryRun}
	if !body.DryRun {
		req.OperationId = newOperationID()
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	ops, err := s.eachPartition(ctx, func(ctx context.Context, p uint32) (*rpc.Operation, error) {
		return s.cfg.Lifecycle.Bulk(ctx, p, req)
	})
	if err != nil {
		what := "bulk " + body.Action
		if req.OperationId != "" {
			// Partitions that applied it go on; GET /operations shows them.
			what += " (operation " + req.OperationId + ")"
		}
		s.writeCallError(w, r, what, err)
		return
	}
	out := BulkAnswer{Operation: req.OperationId, DryRun: body.DryRun}
	for _, op := range ops {
		out.Matched += op.GetMatched()
	}
	writeJSON(w, http.StatusOK, out)
}

// newOperationID returns op_ and 16 random bytes in hex.
func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "op_" + hex.EncodeToString(b[:])
}

// eachPartition calls fn for every partition at once; one failure fails
// all (an operation with a partition missing would look complete).
func (s *server) eachPartition(ctx context.Context, fn func(context.Context, uint32) (*rpc.Operation, error)) ([]*rpc.Operation, error) {
	n := s.cfg.Partitions
	ops := make([]*rpc.Operation, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ops[i], errs[i] = fn(ctx, i+1) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", i+1, err)
		}
	}
	return ops, nil
}

// OperationView is the JSON form of GET /operations/{op}.
type OperationView struct {
	Operation string `json:"operation"`
	Action    string `json:"action"`
	// Done once every partition finished its part.
	Done bool `json:"done"`
	// Applied counts the invocations it has changed so far; Matched, shown
	// once done, those that matched when its command applied (the same
	// number; POST /invocations/bulk answered it at the start).
	Matched *uint64 `json:"matched,omitempty"`
	Applied uint64  `json:"applied"`
	// Scanned counts the listing entries walked so far.
	Scanned    uint64                   `json:"scanned"`
	StartedAt  string                   `json:"startedAt,omitempty"`
	FinishedAt string                   `json:"finishedAt,omitempty"`
	Partitions []OperationPartitionView `json:"partitions"`
}

// OperationPartitionView is one partition's part of an operation.
type OperationPartitionView struct {
	Partition uint32 `json:"partition"`
	Done      bool   `json:"done"`
	Applied   uint64 `json:"applied"`
	Scanned   uint64 `json:"scanned"`
}

func (s *server) getOperation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("op")
	if !strings.HasPrefix(id, "op_") {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("operation %q: an operation id looks like op_… as POST /invocations/bulk answers", id))
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	ops, err := s.eachPartition(ctx, func(ctx context.Context, p uint32) (*rpc.Operation, error) {
		op, err := s.cfg.Lifecycle.Operation(ctx, p, id)
		if errors.Is(err, rpc.ErrNotFound) {
			return nil, nil // a partition the Bulk did not reach (yet)
		}
		return op, err
	})
	if err != nil {
		s.writeCallError(w, r, "operation "+id, err)
		return
	}
	v := OperationView{Operation: id, Done: true, Partitions: []OperationPartitionView{}}
	var started, finished int64
	for i, op := range ops {
		if op == nil {
			v.Done = false
			continue
		}
		v.Action = bulkActionName(op.GetAction())
		v.Applied += op.GetApplied()
		v.Scanned += op.GetScanned()
		v.Done = v.Done && op.GetDone()
		if t := op.GetStartedAtUnixMs(); started == 0 || t < started {
			started = t
		}
		finished = max(finished, op.GetFinishedAtUnixMs())
		v.Partitions = append(v.Partitions, OperationPartitionView{Partition: uint32(i + 1), Done: op.GetDone(),
			Applied: op.GetApplied(), Scanned: op.GetScanned()})
	}
	if len(v.Partitions) == 0 {
		s.writeError(w, r, http.StatusNotFound, "operation "+id+" not found")
		return
	}
	v.StartedAt = optionalTime(started)
	if v.Done {
		v.FinishedAt = optionalTime(finished)
		v.Matched = &v.Applied
	}
	writeJSON(w, http.StatusOK, v)
}
