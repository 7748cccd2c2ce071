package ingress

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/raftgate/raftgate/callback"
	"github.com/raftgate/raftgate/internal/duration"
	"github.com/raftgate/raftgate/rpc"
)

// maxIdempotencyKeyLen bounds the idempotency key: it is stored in the log
// with every invocation.
const maxIdempotencyKeyLen = 4096

// idempotencyKey returns the idempotency-key header ("" when absent).
func idempotencyKey(h http.Header) (string, *apiError) {
	vals := h[headerIdempotencyKey]
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", errBadRequest("bad header idempotency-key: given more than once")
	case vals[0] == "":
		return "", errBadRequest("bad header idempotency-key: empty; omit the header or give a key")
	case len(vals[0]) > maxIdempotencyKeyLen:
		return "", errBadRequest(fmt.Sprintf("bad header idempotency-key: longer than %d bytes", maxIdempotencyKeyLen))
	}
	return vals[0], nil
}

// callbackURL is the invocation's completion callback URL: the request's
// x-raftgate-callback, checked against the cluster's allow-list, else the
// service's default (checked when it was registered), else none.
func callbackURL(h http.Header, allow callback.Allow, svc *rpc.Service) (string, *apiError) {
	vals := h[callback.HeaderURL]
	switch {
	case len(vals) == 0:
		return svc.GetCallbackUrl(), nil
	case len(vals) > 1:
		return "", errBadRequest("bad header x-raftgate-callback: given more than once")
	}
	if err := allow.Check(vals[0]); err != nil {
		return "", errBadRequest("bad header x-raftgate-callback: " + err.Error())
	}
	return vals[0], nil
}

// Bounds of x-raftgate-priority.
const (
	MinPriority = -100
	MaxPriority = 100
)

// priority is the request's x-raftgate-priority: an integer from
// MinPriority to MaxPriority, 0 when absent.
func priority(h http.Header) (int32, *apiError) {
	vals := h.Values("x-raftgate-priority")
	switch {
	case len(vals) == 0:
		return 0, nil
	case len(vals) > 1:
		return 0, errBadRequest("bad header x-raftgate-priority: given more than once")
	}
	n, err := strconv.Atoi(strings.TrimSpace(vals[0]))
	if err != nil || n < MinPriority || n > MaxPriority {
		return 0, errBadRequest(fmt.Sprintf("bad header x-raftgate-priority: %q is not an integer from %d to %d", vals[0], MinPriority, MaxPriority))
	}
	return int32(n), nil
}

// queryValue returns the value of the first query parameter named name
// (ASCII case-insensitive, as Restate matches "delay"), decoded.
func queryValue(rawQuery, name string) (string, bool, *apiError) {
	var value string
	found := false
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			dk, err := url.QueryUnescape(k)
			if err != nil {
				continue
			}
			k = dk
		}
		if !strings.EqualFold(k, name) {
			continue
		}
		if found {
			return "", true, errBadRequest(fmt.Sprintf("bad query parameter %s: given more than once", name))
		}
		dv, err := url.QueryUnescape(v)
		if err != nil {
			return "", true, errBadRequest(fmt.Sprintf("bad query parameter %s: invalid percent-encoding", name))
		}
		value, found = dv, true
	}
	return value, found, nil
}

// delayParam parses ?delay= (found reports whether it was given).
func delayParam(r *http.Request) (d time.Duration, found bool, e *apiError) {
	v, found, e := queryValue(r.URL.RawQuery, "delay")
	if e != nil || !found {
		return 0, found, e
	}
	d, err := duration.Parse(v)
	if err != nil {
		return 0, true, errBadRequest(fmt.Sprintf("bad delay query parameter: %v; use a Go duration (10s, 1h30m, 500ms) or ISO-8601 (PT10S, PT1H30M, P1D)", err))
	}
	return d, true, nil
}

// clientTimeout parses ?timeout= or the x-raftgate-timeout header (the query
// parameter wins). 0 means none was given.
func clientTimeout(r *http.Request) (time.Duration, *apiError) {
	v, found, e := queryValue(r.URL.RawQuery, "timeout")
	if e != nil {
		return 0, e
	}
	what := "timeout query parameter"
	if !found {
		vals := r.Header[headerTimeout]
		if len(vals) == 0 {
			return 0, nil
		}
		if len(vals) > 1 {
			return 0, errBadRequest("bad header x-raftgate-timeout: given more than once")
		}
		v, what = vals[0], "header x-raftgate-timeout"
	}
	d, err := duration.Parse(v)
	if err == nil && d <= 0 {
		err = errors.New("must be positive")
	}
	if err != nil {
		return 0, errBadRequest(fmt.Sprintf("bad %s: %v; use a Go duration (30s, 2m) or ISO-8601 (PT30S)", what, err))
	}
	return d, nil
}

// readBody reads the request body, bounded by MaxBodyBytes and, in time,
// by BodyReadTimeout: the connection's read deadline is set for the body
// and cleared after it, so a long-poll that follows is not cut short.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	limit := h.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, bodyTooLarge(w, limit)
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(h.cfg.BodyReadTimeout)); err == nil {
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	} else if !errors.Is(err, http.ErrNotSupported) {
		return nil, errBadRequest("cannot read request body: " + err.Error())
	}
	// An announced small body is read into one exact allocation. Otherwise
	// grow as data arrives: a client announcing a large body and sending
	// none must not cost memory up front.
	const direct = 64 << 10
	if r.ContentLength > 0 && r.ContentLength <= direct {
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return nil, h.bodyReadError(w, err)
		}
		return buf, nil
	}
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, bodyTooLarge(w, limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, h.bodyReadError(w, err)
		}
	}
}

// bodyTooLarge is the 413 of a body over limit; the connection closes
// because the rest of the body is not read.
func bodyTooLarge(w http.ResponseWriter, limit int64) *apiError {
	w.Header().Set("Connection", "close")
	return &apiError{code: http.StatusRequestEntityTooLarge,
		msg: fmt.Sprintf("request body larger than the limit of %d bytes", limit)}
}

// bodyReadError maps a failed body read: over the limit (413), too slow
// (408), or broken (400).
func (h *Handler) bodyReadError(w http.ResponseWriter, err error) *apiError {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return bodyTooLarge(w, h.cfg.MaxBodyBytes)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.Header().Set("Connection", "close")
		return &apiError{code: http.StatusRequestTimeout,
			msg: fmt.Sprintf("request body not received within %v; nothing was done, send it faster or in one piece", h.cfg.BodyReadTimeout)}
	}
	return errBadRequest("cannot read request body: " + err.Error())
}

// isJSON reports whether a content type is JSON (application/json or any
// application/*+json), ignoring parameters and case.
func isJSON(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	const app = "application/"
	if len(ct) < len(app) || !strings.EqualFold(ct[:len(app)], app) {
		return false
	}
	sub := ct[len(app):]
	return strings.EqualFold(sub, "json") || (len(sub) > 5 && strings.EqualFold(sub[len(sub)-5:], "+json"))
}

// checkJSON refuses a body that is not JSON while its content type says it
// is. An empty body is accepted: it means "no input".
func checkJSON(ct string, body []byte) *apiError {
	if len(body) == 0 || !isJSON(ct) || json.Valid(body) {
		return nil
	}
	return errBadRequest("request body is not valid JSON but content-type is " + quotePath(ct) + ": fix the body or send another content-type")
}
