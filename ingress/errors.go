package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// StatusNotReady is Restate's status for "the invocation has no result
// yet": output of an unfinished invocation, and a call or attach whose
// client timeout passed.
const StatusNotReady = 470

// statusClientGone is recorded in metrics (never sent) when the client went
// away before the answer, as nginx does.
const statusClientGone = 499

// Header names of the ingress API.
const (
	headerInvocationID       = "X-Restate-Id"
	headerErrorSource        = "X-Restate-Error-Source"
	headerIdempotencyKey     = "Idempotency-Key"
	headerIdempotencyExpires = "Idempotency-Expires"
	headerTimeout            = "X-Raftgate-Timeout"
	headerRetryAfter         = "Retry-After"
	headerContentType        = "Content-Type"
)

// Error sources, as in Restate: the cluster's own errors, and a service's.
const (
	sourceIngress    = "ingress"
	sourceInvocation = "invocation"
)

// apiError is an error answer of the ingress itself.
type apiError struct {
	code int
	msg  string
	// retryAfter adds Retry-After: the request may be retried as is.
	retryAfter bool
	// id, when set, is sent as x-restate-id.
	id string
	// allow, when set, is sent as Allow (405).
	allow string
	// authenticate sends WWW-Authenticate (401).
	authenticate bool
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.code, e.msg) }

func errBadRequest(msg string) *apiError { return &apiError{code: http.StatusBadRequest, msg: msg} }
func errNotFound(msg string) *apiError   { return &apiError{code: http.StatusNotFound, msg: msg} }

func errMethod(allow string) *apiError {
	return &apiError{code: http.StatusMethodNotAllowed, msg: "method not allowed: use " + allow, allow: allow}
}

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Source  string `json:"source"`
}

// writeError answers with e and returns the status written.
func (h *Handler) writeError(w http.ResponseWriter, e *apiError) int {
	hdr := w.Header()
	if e.id != "" {
		hdr.Set(headerInvocationID, e.id)
	}
	if e.retryAfter {
		hdr.Set(headerRetryAfter, h.retryAfter)
	}
	if e.allow != "" {
		hdr.Set("Allow", e.allow)
	}
	if e.authenticate {
		hdr.Set("WWW-Authenticate", `Bearer realm="raftgate-ingress"`)
	}
	writeJSONError(w, e.code, e.msg, sourceIngress)
	return e.code
}

// writeJSONError writes {"code","message","source"} with status code.
func writeJSONError(w http.ResponseWriter, code int, msg, source string) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	// Messages quote paths and headers: keep <, >, & readable.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(errorBody{Code: code, Message: msg, Source: source}); err != nil {
		// Cannot happen for these field types.
		body.Reset()
		body.WriteString(`{"code":500,"message":"internal error","source":"ingress"}`)
	}
	hdr := w.Header()
	hdr.Set(headerContentType, "application/json")
	hdr.Set(headerErrorSource, source)
	w.WriteHeader(code)
	_, _ = w.Write(bytes.TrimSuffix(body.Bytes(), []byte("\n")))
}

// Sentinel causes set on contexts so that the ingress can tell its own
// deadlines apart (context.Cause).
var (
	errAppendDeadline = errors.New("request timeout reached")
	errWaitDeadline   = errors.New("wait timeout reached")
	errStopWaiting    = errors.New("ingress shutting down")
)

// retryAdvice tells the caller whether and how retrying an ambiguous append
// is safe.
func retryAdvice(key string, id invocation.ID) string {
	if key != "" {
		return "retrying with the same idempotency-key is safe"
	}
	return fmt.Sprintf("the invocation id is %s: it may or may not have been accepted; GET /restate/invocation/%s/attach tells (404: it was not). Send an idempotency-key header to make retries safe", id, id)
}

// appendError maps an error of Dispatcher.Append to the answer. ok is false
// when the client went away (nothing to write).
func appendError(ctx, reqCtx context.Context, err error, partitionID uint32, key string, id invocation.ID) (*apiError, bool) {
	if reqCtx.Err() != nil {
		return nil, false
	}
	idText := id.String()
	switch {
	case errors.Is(err, rpc.ErrInvalid):
		return &apiError{code: http.StatusBadRequest, msg: "the cluster refused the invocation: " + err.Error()}, true
	case errors.Is(err, rpc.ErrNotFound):
		return &apiError{code: http.StatusNotFound, msg: "the cluster does not know this service: " + err.Error() + "; register it with the admin API (PUT /services/{name})"}, true
	case errors.Is(err, rpc.ErrOverloaded):
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: true, id: idText,
			msg: fmt.Sprintf("partition %d is overloaded, nothing was done; retry later: %s", partitionID, retryAdvice(key, id))}, true
	case errors.Is(err, rpc.ErrKeyReused):
		return &apiError{code: http.StatusUnprocessableEntity, id: idText,
			msg: fmt.Sprintf("idempotency key %q was already used with another request body (invocation %s); nothing was done: use a new key for a new request", key, idText)}, true
	case errors.Is(err, rpc.ErrStaleRegistry):
		// Refused twice: the service changed again while the second
		// attempt was under way. Nothing was stored.
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: true, id: idText,
			msg: "the service's registration changed while the invocation was being accepted, nothing was done; retrying is safe"}, true
	case errors.Is(err, rpc.ErrUnavailable) || errors.Is(context.Cause(ctx), errAppendDeadline):
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: true, id: idText,
			msg: fmt.Sprintf("the cluster could not take the invocation in time (no leader answered for partition %d); %s", partitionID, retryAdvice(key, id))}, true
	default:
		return &apiError{code: http.StatusInternalServerError, id: idText,
			msg: fmt.Sprintf("internal error while appending the invocation to partition %d: %v; %s", partitionID, err, retryAdvice(key, id))}, true
	}
}

// lookupError maps an error of Dispatcher.Output or Attach. ok is false when
// the client went away.
func lookupError(ctx, reqCtx context.Context, err error, partitionID uint32, id invocation.ID) (*apiError, bool) {
	if reqCtx.Err() != nil {
		return nil, false
	}
	idText := id.String()
	switch {
	case errors.Is(context.Cause(ctx), errStopWaiting):
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: true, id: idText,
			msg: fmt.Sprintf("this ingress is shutting down; invocation %s keeps running: attach to it at another node with GET /restate/invocation/%s/attach (retrying a call without an idempotency-key would start a new invocation)", idText, idText)}, true
	case errors.Is(context.Cause(ctx), errWaitDeadline):
		return &apiError{code: StatusNotReady, id: idText,
			msg: fmt.Sprintf("invocation %s has not completed within the timeout; it keeps running: attach again with GET /restate/invocation/%s/attach, or poll /output", idText, idText)}, true
	case errors.Is(err, rpc.ErrNotReady):
		return &apiError{code: StatusNotReady, id: idText,
			msg: fmt.Sprintf("invocation %s has not completed yet (not ready): wait for it with GET /restate/invocation/%s/attach, or poll /output again later", idText, idText)}, true
	case errors.Is(err, rpc.ErrNotFound):
		return &apiError{code: http.StatusNotFound, id: idText,
			msg: fmt.Sprintf("invocation %s not found: it does not exist, or its result was purged after the retention window", idText)}, true
	case errors.Is(err, rpc.ErrInvalid):
		return &apiError{code: http.StatusBadRequest, id: idText, msg: "the cluster refused the request: " + err.Error()}, true
	case errors.Is(err, rpc.ErrOverloaded):
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: true, id: idText,
			msg: fmt.Sprintf("partition %d is overloaded; retrying is safe", partitionID)}, true
	case errors.Is(err, rpc.ErrStaleRegistry):
		// Refused twice: the service changed again while the second
		// attempt was under way. Nothing was stored.
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: true, id: idText,
			msg: "the service's registration changed while the invocation was being accepted, nothing was done; retrying is safe"}, true
	case errors.Is(err, rpc.ErrUnavailable) || errors.Is(context.Cause(ctx), errAppendDeadline):
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: true, id: idText,
			msg: fmt.Sprintf("no leader of partition %d answered in time; retrying is safe", partitionID)}, true
	default:
		return &apiError{code: http.StatusInternalServerError, id: idText,
			msg: fmt.Sprintf("internal error while reading invocation %s: %v; retrying is safe", idText, err)}, true
	}
}
