package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// parseInvocationID parses a printed invocation id as the ingress accepts
// it: invocation.ParseID, plus canonical form (base32 leaves 3 spare bits in
// the last character; two spellings of one id would otherwise both parse).
func parseInvocationID(s string) (invocation.ID, error) {
	id, err := invocation.ParseID(s)
	if err != nil {
		return id, err
	}
	if !strings.EqualFold(id.String(), s) {
		return invocation.ID{}, invocation.ErrMalformedID
	}
	return id, nil
}

// lookup serves GET /restate/invocation/.../attach and .../output,
// /restate/workflow/{workflow}/{id}/attach and .../output, and Restate
// 1.7's /restate/attach|output|lookup (by id, or a target), for a caller
// holding grant (nil: authentication is off).
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, rt route, grant *Grant) int {
	start := time.Now()
	var id invocation.ID
	switch {
	case len(rt.objectKey) > maxObjectKeyLen:
		return h.writeError(w, errBadRequest(fmt.Sprintf("bad path: the key is longer than %d bytes", maxObjectKeyLen)))
	case rt.workflow:
		id = invocation.WorkflowRun(rt.service, rt.objectKey)
	case rt.byKey():
		if len(rt.key) > maxIdempotencyKeyLen {
			return h.writeError(w, errBadRequest(fmt.Sprintf("bad idempotency key in the path: longer than %d bytes", maxIdempotencyKeyLen)))
		}
		if rt.keyed {
			id = invocation.IdempotentKeyed(rt.service, rt.objectKey, rt.handler, rt.key)
		} else {
			id = invocation.Idempotent(rt.service, rt.handler, rt.key)
		}
	default:
		var e *apiError
		if id, e = h.parsePathID(rt.id); e != nil {
			return h.writeError(w, e)
		}
	}
	part := invocation.PartitionFor(id.PartitionKey(), h.cfg.Partitions)
	if rt.id != "" { // by id: the path does not name the service
		if status, ok := h.authorizeInvocation(w, r, grant, part, id); !ok {
			return status
		}
	}
	if rt.kind == routeAttach {
		timeout, e := clientTimeout(r)
		if e != nil {
			return h.writeError(w, e)
		}
		return h.waitResult(w, r, start, timeout, part, id, "")
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), h.cfg.RequestTimeout, errAppendDeadline)
	defer cancel()
	res, err := h.cfg.Dispatcher.Output(ctx, part, id[:])
	if rt.kind == routeLookup && (err == nil || errors.Is(err, rpc.ErrNotReady)) {
		return h.writeLookup(w, id)
	}
	if err != nil {
		return h.lookupFailed(w, ctx, r.Context(), err, part, id)
	}
	return h.writeResult(w, id, "", res)
}

// writeLookup answers POST /restate/lookup: the target's invocation id,
// which exists (completed or not).
func (h *Handler) writeLookup(w http.ResponseWriter, id invocation.ID) int {
	hdr := w.Header()
	hdr.Set(headerContentType, "application/json")
	hdr.Set(headerInvocationID, id.String())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"invocationId":"` + id.String() + `"}`))
	return http.StatusOK
}

// parsePathID parses the invocation id of an /restate/invocation/{id}/…
// path.
func (h *Handler) parsePathID(text string) (invocation.ID, *apiError) {
	id, err := parseInvocationID(text)
	if err != nil {
		return id, errBadRequest("malformed invocation id " + quotePath(text) +
			": expected lowercase inv_ and 39 base32 characters (any case) spelled as raftgate prints them" +
			" (the last character carries spare bits and has one valid spelling); copy it from x-restate-id")
	}
	return id, nil
}

// cancel serves PATCH /restate/invocation/{id}/cancel: it completes the
// invocation with a cancelled result unless it completed already, and
// answers 202 {"invocationId"} once that is applied.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, rt route, grant *Grant) int {
	ctl, ok := h.cfg.Dispatcher.(InvocationControl)
	if !ok {
		return h.writeError(w, errNotFound("this ingress cannot cancel invocations: use the admin API (DELETE /invocations/{id})"))
	}
	id, e := h.parsePathID(rt.id)
	if e != nil {
		return h.writeError(w, e)
	}
	part := invocation.PartitionFor(id.PartitionKey(), h.cfg.Partitions)
	if status, ok := h.authorizeInvocation(w, r, grant, part, id); !ok {
		return status
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), h.cfg.RequestTimeout, errAppendDeadline)
	defer cancel()
	if err := ctl.Cancel(ctx, part, id[:]); err != nil {
		return h.lookupFailed(w, ctx, r.Context(), err, part, id)
	}
	hdr := w.Header()
	hdr.Set(headerContentType, "application/json")
	hdr.Set(headerInvocationID, id.String())
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"invocationId":"` + id.String() + `"}`))
	return http.StatusAccepted
}

// waitResult attaches to invocation id until its result exists, the wait
// timeout (client's, else DefaultCallTimeout, counted from start) passes, or
// the client goes away.
func (h *Handler) waitResult(w http.ResponseWriter, r *http.Request, start time.Time, timeout time.Duration, part uint32, id invocation.ID, key string) int {
	ctx, cancel := h.waitContext(r, start, timeout)
	defer cancel()
	res, err := h.cfg.Dispatcher.Attach(ctx, part, id[:])
	if err != nil {
		return h.lookupFailed(w, ctx, r.Context(), err, part, id)
	}
	return h.writeResult(w, id, key, res)
}

// waitContext is the context of a wait for a result: it ends when the
// client goes away, the ingress stops waiting (errStopWaiting) or the wait
// timeout passes (the client's, else DefaultCallTimeout, counted from
// start; errWaitDeadline).
func (h *Handler) waitContext(r *http.Request, start time.Time, timeout time.Duration) (context.Context, func()) {
	if timeout <= 0 {
		timeout = h.cfg.DefaultCallTimeout
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	stop := context.AfterFunc(h.stopWaiting, func() { cancel(errStopWaiting) })
	if timeout <= 0 {
		return ctx, func() { stop(); cancel(nil) }
	}
	dctx, cancelTimeout := context.WithDeadlineCause(ctx, start.Add(timeout), errWaitDeadline)
	return dctx, func() { cancelTimeout(); stop(); cancel(nil) }
}

func (h *Handler) lookupFailed(w http.ResponseWriter, ctx, reqCtx context.Context, err error, part uint32, id invocation.ID) int {
	ae, ok := lookupError(ctx, reqCtx, err, part, id)
	if !ok {
		return statusClientGone
	}
	if ae.code >= 500 {
		h.log.Warn().Err(err).Uint32("partition", part).Stringer("invocation", id).Msg("result lookup failed")
	}
	return h.writeError(w, ae)
}

// writeResult answers with an invocation's result. key is the caller's
// idempotency key of a call, if any.
func (h *Handler) writeResult(w http.ResponseWriter, id invocation.ID, key string, ir *rpc.InvocationResult) int {
	res := ir.GetResult()
	if res == nil {
		h.log.Error().Stringer("invocation", id).Msg("dispatcher returned a result without a Result")
		return h.writeError(w, &apiError{code: http.StatusInternalServerError, id: id.String(),
			msg: "internal error: the cluster returned an empty result; retrying is safe"})
	}
	hdr := w.Header()
	hdr.Set(headerInvocationID, id.String())
	if (key != "" || ir.GetIdempotencyKey() != "") && ir.GetCompletedAtUnixMs() > 0 {
		h.setIdempotencyExpires(hdr, ir.GetCompletedAtUnixMs())
	}
	status := int(res.GetStatus())
	if res.GetFailed() {
		if status < 400 || status > 599 {
			status = http.StatusInternalServerError
		}
		if res.GetError() != "" {
			// raftgate produced the failure (retries exhausted, cancelled).
			writeJSONError(w, status, res.GetError(), sourceInvocation)
			return status
		}
		hdr.Set(headerErrorSource, sourceInvocation)
	} else if status < 200 || status > 299 {
		status = http.StatusOK
	}
	if ct := res.GetContentType(); ct != "" {
		hdr.Set(headerContentType, ct)
	} else {
		hdr[headerContentType] = nil // no sniffing: the service gave none
	}
	body := res.GetBody()
	if status == http.StatusNoContent || status == http.StatusNotModified {
		w.WriteHeader(status) // no body allowed
		return status
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return status
}

// setIdempotencyExpires sets idempotency-expires: when the result of an
// invocation completed at completedMs stops being kept.
func (h *Handler) setIdempotencyExpires(hdr http.Header, completedMs int64) {
	expires := time.UnixMilli(completedMs).Add(h.cfg.Retention).UTC()
	hdr.Set(headerIdempotencyExpires, expires.Format(time.RFC3339Nano))
}
