package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// maxObjectKeyLen bounds an object key or workflow id: it is stored in
// every invocation of the key.
const maxObjectKeyLen = 1024

// invoke serves POST /{service}/{handler}, /{object}/{key}/{handler},
// /{workflow}/{id}/{handler} and their .../send, and Restate 1.7's
// /restate/[scope/{scope}/]call|send/…, whose body was read.
func (h *Handler) invoke(w http.ResponseWriter, r *http.Request, rt route, body []byte) int {
	return h.invokeChecked(w, r, rt, body, h.cfg.Services.Lookup, true)
}

// currentLookup is the lookup after a partition refused an invocation as
// checked against a stale registration: one that has caught up.
func (h *Handler) currentLookup(ctx context.Context, name string) (*rpc.Service, error) {
	if c, ok := h.cfg.Services.(CurrentServiceResolver); ok {
		return c.LookupCurrent(ctx, name)
	}
	return h.cfg.Services.Lookup(ctx, name)
}

// invokeChecked is invoke with the service looked up by lookup. When a
// partition refuses the invocation because the registration it was checked
// against changed since (nothing was stored), it runs once more with the
// current registration if again is set.
func (h *Handler) invokeChecked(w http.ResponseWriter, r *http.Request, rt route, body []byte,
	lookup func(context.Context, string) (*rpc.Service, error), again bool) int {
	start := time.Now()
	asked := rt
	svc, err := lookup(r.Context(), rt.service)
	if err != nil && !errors.Is(err, rpc.ErrNotFound) {
		return h.writeError(w, &apiError{code: http.StatusServiceUnavailable, retryAfter: true,
			msg: fmt.Sprintf("cannot tell whether service '%s' exists (%v); nothing was done, retrying is safe", rt.service, err)})
	}
	if svc == nil {
		return h.writeError(w, errNotFound(fmt.Sprintf(
			"service '%s' not found: register it first (raftgate services add %s URL, or PUT /services/%s on the admin API)",
			rt.service, rt.service, rt.service)))
	}
	rt, e := rt.resolve(rt.service, svc.Kind != rpc.Service_SERVICE)
	if e != nil {
		return h.writeError(w, e)
	}
	send := rt.kind == routeSend
	if err := registry.ValidateHandlerName(rt.handler); err != nil {
		return h.writeError(w, errBadRequest("bad path: "+err.Error()))
	}
	if len(rt.objectKey) > maxObjectKeyLen {
		return h.writeError(w, errBadRequest(fmt.Sprintf("bad path: the key is longer than %d bytes", maxObjectKeyLen)))
	}
	if len(svc.Handlers) > 0 && !slices.Contains(svc.Handlers, rt.handler) {
		return h.writeError(w, errNotFound(fmt.Sprintf(
			"the service '%s' exists, but has no handler '%s': its registration lists %v",
			rt.service, rt.handler, svc.Handlers)))
	}
	key, e := idempotencyKey(r.Header)
	if e != nil {
		return h.writeError(w, e)
	}
	workflowRun := svc.Kind == rpc.Service_WORKFLOW && rt.handler == registry.WorkflowRun
	if workflowRun && key != "" {
		// Restate's answer: the workflow id already makes run idempotent.
		return h.writeError(w, errBadRequest("cannot use the idempotency key with workflow handlers. The handler invocation will already be idempotent by the workflow key itself."))
	}
	delay, hasDelay, e := delayParam(r)
	if e != nil {
		return h.writeError(w, e)
	}
	if hasDelay && !send {
		return h.writeError(w, errBadRequest(
			"the delay query parameter works only with send (POST /{service}/{handler}/send?delay=10s): a call waits for the result"))
	}
	timeout, e := clientTimeout(r)
	if e != nil {
		return h.writeError(w, e)
	}
	if timeout > 0 && send {
		return h.writeError(w, errBadRequest(
			"a client timeout (?timeout= or x-raftgate-timeout) works only with a call or an attach, which wait for the result: a send answers as soon as the invocation is accepted"))
	}
	contentType := r.Header.Get(headerContentType)
	if e := checkJSON(contentType, body); e != nil {
		return h.writeError(w, e)
	}
	cbURL, e := callbackURL(r.Header, h.cfg.CallbackAllow, svc)
	if e != nil {
		return h.writeError(w, e)
	}
	prio, e := priority(r.Header)
	if e != nil {
		return h.writeError(w, e)
	}

	// The id and the request id are fixed before the first attempt, so that
	// every retry inside the cluster is the same request.
	var id invocation.ID
	switch {
	case workflowRun:
		id = invocation.WorkflowRun(rt.service, rt.objectKey)
	case rt.keyed && key != "":
		id = invocation.IdempotentKeyed(rt.service, rt.objectKey, rt.handler, key)
	case rt.keyed:
		id = invocation.RandomKeyed(rt.service, rt.objectKey)
	case key != "":
		id = invocation.Idempotent(rt.service, rt.handler, key)
	default:
		id = h.freshID()
	}
	part := invocation.PartitionFor(id.PartitionKey(), h.cfg.Partitions)
	// The partition's leader stamps the proposal time, and the not-before
	// time from the delay, with its own clock (one clock places both).
	inv := &rpc.Invoke{
		InvocationId:   id[:],
		RequestId:      invocation.NewRequestID(),
		Service:        rt.service,
		Handler:        rt.handler,
		Body:           body,
		ContentType:    contentType,
		Headers:        h.forwardHeaders(r.Header),
		IdempotencyKey: key,
		Key:            rt.objectKey,
		Exclusive:      rt.keyed && registry.Exclusive(svc, rt.handler),

		ServiceRegisteredIndex: svc.RegisteredIndex,
		CallbackUrl:            cbURL,
		RejectReusedKey:        key != "" && (h.cfg.RejectReusedIdempotencyKeys || svc.GetRejectReusedIdempotencyKeys()),
		Scope:                  rt.scope,
		Priority:               prio,
	}
	if hasDelay {
		// Even ?delay=0s: the answer then carries executionTime (the
		// proposal time).
		inv.DelayMs = proto.Int64(delay.Milliseconds())
		// Only for a leader older than delay_ms, which ignores it, during
		// a rolling upgrade; a newer leader overwrites it.
		inv.NotBeforeUnixMs = h.cfg.Clock().Add(delay).UnixMilli()
	}

	appendTimeout := h.cfg.RequestTimeout
	if timeout > 0 && timeout < appendTimeout {
		appendTimeout = timeout
	}
	if c, ok := h.cfg.Dispatcher.(Caller); ok && !send && !workflowRun {
		// A workflow's run answers 409 at once when it was invoked
		// before, so it does not wait at the leader.
		return h.call(w, r, c, start, timeout, appendTimeout, part, id, inv, asked, body, key, again)
	}
	actx, cancel := context.WithTimeoutCause(r.Context(), appendTimeout, errAppendDeadline)
	appended, err := h.cfg.Dispatcher.Append(actx, part, inv)
	cancel()
	if errors.Is(err, rpc.ErrStaleRegistry) && again && r.Context().Err() == nil {
		return h.invokeChecked(w, r, asked, body, h.currentLookup, false)
	}
	if err != nil {
		return h.appendFailed(w, actx, r.Context(), err, part, key, id)
	}
	if send {
		if key != "" && appended.GetCompletedAtUnixMs() > 0 {
			h.setIdempotencyExpires(w.Header(), appended.GetCompletedAtUnixMs())
		}
		return h.writeSendResponse(w, id, (key != "" || workflowRun) && appended.GetPreviouslyAccepted(), appended.GetNotBeforeUnixMs())
	}
	if workflowRun && appended.GetPreviouslyAccepted() {
		// As Restate: a workflow runs once per id; attach or output by
		// workflow id reads that run's result.
		return h.writeError(w, &apiError{code: http.StatusConflict, id: id.String(), msg: "the workflow method was already invoked"})
	}
	return h.waitResult(w, r, start, timeout, part, id, key)
}

// call appends inv and waits for its result in one request to the leader;
// an answer without the result (see Caller) falls back to waitResult.
func (h *Handler) call(w http.ResponseWriter, r *http.Request, c Caller, start time.Time, timeout, appendTimeout time.Duration,
	part uint32, id invocation.ID, inv *rpc.Invoke, asked route, body []byte, key string, again bool) int {
	ctx, cancel := h.waitContext(r, start, timeout)
	defer cancel()
	appended, err := c.Call(ctx, part, inv, appendTimeout)
	if errors.Is(err, rpc.ErrStaleRegistry) && again && r.Context().Err() == nil {
		return h.invokeChecked(w, r, asked, body, h.currentLookup, false)
	}
	if err == nil && appended.GetResult() != nil {
		return h.writeResult(w, id, key, appended.GetResult())
	}
	if ctx.Err() != nil && (err == nil || errors.Is(context.Cause(ctx), errStopWaiting)) {
		// The wait ended (when draining, the invocation may have been
		// appended or not).
		return h.lookupFailed(w, ctx, r.Context(), ctx.Err(), part, id)
	}
	if err != nil {
		return h.appendFailed(w, ctx, r.Context(), err, part, key, id)
	}
	return h.waitResult(w, r, start, timeout, part, id, key)
}

// appendFailed answers an append or call that failed (see appendError).
func (h *Handler) appendFailed(w http.ResponseWriter, ctx, reqCtx context.Context, err error, part uint32, key string, id invocation.ID) int {
	ae, ok := appendError(ctx, reqCtx, err, part, key, id)
	if !ok {
		return statusClientGone
	}
	if ae.code >= 500 {
		h.log.Warn().Err(err).Uint32("partition", part).Stringer("invocation", id).Msg("append failed")
	}
	return h.writeError(w, ae)
}

// forwardHeaders copies the configured headers into the invocation.
func (h *Handler) forwardHeaders(hdr http.Header) []*rpc.Header {
	if len(h.forward) == 0 {
		return nil
	}
	var out []*rpc.Header
	for canonical, lower := range h.forward {
		for _, v := range hdr[canonical] {
			out = append(out, &rpc.Header{Name: lower, Value: v})
		}
	}
	// Map order is random; the log entry should not be.
	slices.SortStableFunc(out, func(a, b *rpc.Header) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// writeSendResponse answers a send with 202 and
// {"invocationId","status"[,"executionTime"]}. previously is only reported
// for a caller's idempotency key: without one, a duplicate can only be this
// request's own retry inside the cluster.
func (h *Handler) writeSendResponse(w http.ResponseWriter, id invocation.ID, previously bool, notBeforeMs int64) int {
	b := make([]byte, 0, 128)
	b = append(b, `{"invocationId":"`...)
	start := len(b)
	b = id.Append(b)
	idText := string(b[start:])
	b = append(b, `","status":"`...)
	if previously {
		b = append(b, "PreviouslyAccepted"...)
	} else {
		b = append(b, "Accepted"...)
	}
	b = append(b, '"')
	if notBeforeMs > 0 {
		b = append(b, `,"executionTime":"`...)
		b = time.UnixMilli(notBeforeMs).UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, '}')
	hdr := w.Header()
	hdr.Set(headerContentType, "application/json")
	hdr.Set(headerInvocationID, idText)
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(b)
	return http.StatusAccepted
}

// freshID returns the id of an invocation whose partition is free to
// choose: in a partition this node leads when there is one (Config.
// LocalPartitions), so that its append skips the hop to another node, the
// led partitions taking turns of Config.LocalTurn invocations.
func (h *Handler) freshID() invocation.ID {
	if h.cfg.LocalPartitions == nil {
		return invocation.Random()
	}
	led := h.cfg.LocalPartitions()
	for len(led) > 0 && led[0] == 0 {
		led = led[1:]
	}
	for len(led) > 0 && led[len(led)-1] > h.cfg.Partitions {
		led = led[:len(led)-1]
	}
	if len(led) == 0 {
		return invocation.Random()
	}
	turn := (h.fresh.Add(1) - 1) / uint64(h.cfg.LocalTurn)
	return invocation.RandomIn(led[turn%uint64(len(led))], h.cfg.Partitions)
}
