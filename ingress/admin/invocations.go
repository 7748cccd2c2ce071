package admin

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// maxBodyPreview bounds the request and result bodies shown in a status
// answer unless ?full=true.
const maxBodyPreview = 4096

// InvocationView is the JSON form of GET /invocations/{id}.
type InvocationView struct {
	ID        string `json:"id"`
	Partition uint32 `json:"partition"`
	// Leader is the partition's leader as this node knows it (0: none).
	Leader         uint64 `json:"leader"`
	Service        string `json:"service,omitempty"`
	Handler        string `json:"handler,omitempty"`
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
	HeldBy string `json:"heldBy,omitempty"`
	// Status is pending, running, completed, queued (an exclusive handler
	// waiting for its key), scheduled (a delayed exclusive handler, not
	// yet due, so not yet queued) or paused (its retries were exhausted,
	// or an operator paused it: it waits for an operator; LastError says
	// why).
	Status string `json:"status"`
	// QueuePosition, when queued, counts the invocations ahead of it (the
	// running one not counted: 0 runs next).
	QueuePosition *uint64 `json:"queuePosition,omitempty"`
	// Attempts counts the deliveries that ended: the failed ones, plus
	// the one that produced the result once there is one.
	Attempts  uint32 `json:"attempts"`
	LastError string `json:"lastError,omitempty"`
	// Timestamps are RFC 3339 in UTC; omitted when not (yet) known.
	AcceptedAt    string         `json:"acceptedAt,omitempty"`
	ExecutionTime string         `json:"executionTime,omitempty"`
	NextRetryAt   string         `json:"nextRetryAt,omitempty"`
	CompletedAt   string         `json:"completedAt,omitempty"`
	Request       *BodyView      `json:"request,omitempty"`
	Result        *ResultSummary `json:"result,omitempty"`
	// Callback is the completion callback's delivery, when the invocation
	// has a callback URL.
	Callback *CallbackView `json:"callback,omitempty"`
	// Restart links: the invocation this one was restarted as, and the one
	// it restarts.
	RestartedAs   string `json:"restartedAs,omitempty"`
	RestartedFrom string `json:"restartedFrom,omitempty"`
	// URL is where deliveries go when an operator resumed it with one.
	URL string `json:"url,omitempty"`
}

// CallbackView is the delivery state of an invocation's completion
// callback: waiting (until the invocation completes), pending (being
// delivered, or retried at nextAttemptAt), delivered, or failed (given up
// after its attempts; the invocation's result is not affected).
type CallbackView struct {
	URL           string `json:"url"`
	State         string `json:"state"`
	Attempts      uint32 `json:"attempts"`
	LastError     string `json:"lastError,omitempty"`
	NextAttemptAt string `json:"nextAttemptAt,omitempty"`
}

func callbackView(rec *rpc.InvocationRecord) *CallbackView {
	url := rec.GetInvoke().GetCallbackUrl()
	if url == "" {
		return nil
	}
	cb := rec.GetCallback()
	v := &CallbackView{URL: url, State: "waiting", Attempts: cb.GetAttempts(), LastError: cb.GetLastError(),
		NextAttemptAt: optionalTime(cb.GetRetryAtUnixMs())}
	switch cb.GetState() {
	case rpc.CallbackState_PENDING:
		v.State = "pending"
	case rpc.CallbackState_DELIVERED:
		v.State = "delivered"
	case rpc.CallbackState_FAILED:
		v.State = "failed"
	}
	return v
}

// BodyView is a request or result body, cut to maxBodyPreview unless the
// whole body was asked for (?full=true).
type BodyView struct {
	ContentType string `json:"contentType,omitempty"`
	BodyBytes   int    `json:"bodyBytes"`
	// Body is the body when it is UTF-8 text, BodyBase64 otherwise.
	Body       string `json:"body,omitempty"`
	BodyBase64 string `json:"bodyBase64,omitempty"`
	// BodyTruncated: Body is a prefix. A completed invocation keeps only
	// the first 4 KiB of its request (partition.RequestPreviewBytes).
	BodyTruncated bool `json:"bodyTruncated,omitempty"`
}

// ResultSummary describes a recorded result.
type ResultSummary struct {
	Status uint32 `json:"status"`
	Failed bool   `json:"failed"`
	Error  string `json:"error,omitempty"`
	BodyView
}

func stateName(s rpc.InvocationRecord_State) string {
	switch s {
	case rpc.InvocationRecord_PENDING:
		return "pending"
	case rpc.InvocationRecord_RUNNING:
		return "running"
	case rpc.InvocationRecord_COMPLETED:
		return "completed"
	case rpc.InvocationRecord_QUEUED:
		return "queued"
	case rpc.InvocationRecord_SCHEDULED:
		return "scheduled"
	case rpc.InvocationRecord_PAUSED:
		return "paused"
	default:
		return "unknown"
	}
}

// invocationView renders a record; it reads only the record, so it is the
// same on every node. full shows whole bodies.
func invocationView(id invocation.ID, p uint32, rec *rpc.InvocationRecord, full bool) InvocationView {
	inv := rec.GetInvoke()
	v := InvocationView{
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
	}
	if rec.GetState() == rpc.InvocationRecord_QUEUED {
		pos := rec.GetQueuePosition()
		v.QueuePosition = &pos
	}
	accepted := rec.GetAcceptedAtUnixMs()
	if accepted == 0 {
		accepted = inv.GetProposedAtUnixMs()
	}
	v.AcceptedAt = optionalTime(accepted)
	v.ExecutionTime = optionalTime(inv.GetNotBeforeUnixMs())
	if rec.GetState() != rpc.InvocationRecord_COMPLETED {
		v.NextRetryAt = optionalTime(rec.GetRetryAtUnixMs())
	}
	v.CompletedAt = optionalTime(rec.GetCompletedAtUnixMs())
	if as, err := invocation.IDFromBytes(rec.GetRestartedAs()); err == nil {
		v.RestartedAs = as.String()
	}
	if from, err := invocation.IDFromBytes(rec.GetRestartedFrom()); err == nil {
		v.RestartedFrom = from.String()
	}
	v.URL = rec.GetUrl()
	req := bodyView(inv.GetBody(), inv.GetContentType(), full)
	if n := int(rec.GetRequestBodyBytes()); n > req.BodyBytes {
		req.BodyBytes, req.BodyTruncated = n, true
	}
	v.Request = &req
	v.Callback = callbackView(rec)
	if res := rec.GetResult(); res != nil {
		v.Result = resultSummary(res, full)
		// The record counts failed deliveries; the result, every delivery
		// up to and including its own.
		v.Attempts = max(v.Attempts, res.GetAttempts())
	}
	return v
}

func resultSummary(res *rpc.Result, full bool) *ResultSummary {
	return &ResultSummary{
		Status:   res.GetStatus(),
		Failed:   res.GetFailed(),
		Error:    res.GetError(),
		BodyView: bodyView(res.GetBody(), res.GetContentType(), full),
	}
}

func bodyView(body []byte, contentType string, full bool) BodyView {
	v := BodyView{ContentType: contentType, BodyBytes: len(body)}
	text := utf8.Valid(body)
	if !full && len(body) > maxBodyPreview {
		body = body[:maxBodyPreview]
		// Do not cut a UTF-8 sequence in half.
		for text && len(body) > 0 && !utf8.Valid(body) {
			body = body[:len(body)-1]
		}
		v.BodyTruncated = true
	}
	if text {
		v.Body = string(body)
	} else {
		v.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
	return v
}

func optionalTime(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return formatTime(ms)
}

// parseInvocationID reads {id} and routes it to its partition.
func (s *server) parseInvocationID(w http.ResponseWriter, r *http.Request) (invocation.ID, uint32, bool) {
	id, err := invocation.ParseID(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("%v: an invocation id looks like inv_… as returned in x-restate-id", err))
		return id, 0, false
	}
	return id, invocation.PartitionFor(id.PartitionKey(), s.cfg.Partitions), true
}

func (s *server) getInvocation(w http.ResponseWriter, r *http.Request) {
	id, p, ok := s.parseInvocationID(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	rec, err := s.cfg.Invocations.Status(ctx, p, id.Bytes())
	if err != nil {
		s.writeCallError(w, r, fmt.Sprintf("invocation %s", id), err)
		return
	}
	v := invocationView(id, p, rec, r.URL.Query().Get("full") == "true")
	v.Leader = s.leaderOf(p)
	writeJSON(w, http.StatusOK, v)
}

// leaderOf returns partition p's leader as this node knows it.
func (s *server) leaderOf(p uint32) uint64 {
	for _, ps := range s.cfg.Cluster.Partitions(false) {
		if ps.ID == p {
			return ps.Leader
		}
	}
	return 0
}

// cancelInvocation cancels, then answers with the invocation's status after
// the cancellation (completed, with the cancelled result unless it had
// completed before). If that status cannot be read, it answers 202.
func (s *server) cancelInvocation(w http.ResponseWriter, r *http.Request) {
	id, p, ok := s.parseInvocationID(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	if err := s.cfg.Invocations.Cancel(ctx, p, id.Bytes()); err != nil {
		s.writeCallError(w, r, fmt.Sprintf("cancel invocation %s", id), err)
		return
	}
	rec, err := s.cfg.Invocations.Status(ctx, p, id.Bytes())
	if err != nil {
		s.log.Debug().Err(err).Str("invocation", id.String()).Msg("status after cancel unavailable")
		// Cancel returned once applied, so the invocation is completed.
		writeJSON(w, http.StatusAccepted, InvocationView{ID: id.String(), Partition: p, Status: "completed"})
		return
	}
	v := invocationView(id, p, rec, false)
	v.Leader = s.leaderOf(p)
	writeJSON(w, http.StatusOK, v)
}

// ObjectKeyView is the JSON form of GET /objects/{object}/{key}.
type ObjectKeyView struct {
	Service   string `json:"service"`
	Key       string `json:"key"`
	Partition uint32 `json:"partition"`
	// Running is the id of the exclusive invocation holding the key;
	// omitted when none does.
	Running string `json:"running,omitempty"`
	// Queued counts the exclusive invocations waiting behind it.
	Queued uint64 `json:"queued"`
}

func (s *server) getObjectKey(w http.ResponseWriter, r *http.Request) {
	service, key := r.PathValue("object"), r.PathValue("key")
	p := invocation.PartitionFor(invocation.KeyedPartitionKey(service, key), s.cfg.Partitions)
	ctx, cancel := s.callContext(r)
	defer cancel()
	ks, err := s.cfg.Keys.KeyStatus(ctx, p, service, key)
	if err != nil {
		s.writeCallError(w, r, fmt.Sprintf("key %q of %q", key, service), err)
		return
	}
	v := ObjectKeyView{Service: service, Key: key, Partition: p, Queued: ks.GetQueued()}
	if id, err := invocation.IDFromBytes(ks.GetRunning()); err == nil {
		v.Running = id.String()
	}
	writeJSON(w, http.StatusOK, v)
}
