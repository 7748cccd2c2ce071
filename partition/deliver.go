package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
)

// attemptOutcome is what one delivery attempt produced.
type attemptOutcome struct {
	outcome outbox.Outcome
	// result is the result to record when the outcome is final (or when
	// retries are exhausted: the last answer, marked failed).
	result     *rpc.Result
	reason     string        // why the attempt failed, for AttemptFailed
	retryAfter time.Duration // the service's Retry-After, 0 if none
}

// Header names of the service protocol (docs/api.md, "How raftgate calls
// a service"), in canonical form, so setting them copies nothing (HTTP
// header names are case-insensitive).
const (
	headerInvocationID   = "X-Restate-Id"
	headerAttempt        = "X-Raftgate-Attempt"
	headerAttemptID      = "X-Raftgate-Attempt-Id"
	headerIdempotencyKey = "Idempotency-Key"
	headerKey            = "X-Raftgate-Key"
)

// call makes one HTTP attempt of rec's invocation at service svc, as the
// registry lookup found it (lookupErr), or at the URL an operator resumed
// it with, bounded by timeout.
func (iv *invoker) call(ctx context.Context, rec *rpc.InvocationRecord, attempt uint32, attemptID string, svc *rpc.Service, lookupErr error, timeout time.Duration) attemptOutcome {
	inv := rec.Invoke
	switch {
	case errors.Is(lookupErr, rpc.ErrNotFound):
		// The invocation was accepted while the service was registered
		// (the ingress checks that, caught up): it was removed since.
		// Retrying cannot help.
		return terminalOutcome(http.StatusNotFound, fmt.Sprintf("service %q was removed: it is not registered any more", inv.Service))
	case lookupErr != nil:
		return retryOutcome(http.StatusServiceUnavailable, fmt.Sprintf("cannot check that service %q is registered: %v", inv.Service, lookupErr))
	}
	if len(svc.Handlers) > 0 && !slices.Contains(svc.Handlers, inv.Handler) {
		return terminalOutcome(http.StatusNotFound, fmt.Sprintf("handler %q of service %q is not registered", inv.Handler, inv.Service))
	}
	// {url}/{service}/{handler}, each name escaped into exactly one path
	// segment. An empty name or a dot segment ("." or "..", which URL
	// resolution on the service's side would climb out of) cannot be one.
	for _, name := range []string{inv.Service, inv.Handler} {
		if name == "" || name == "." || name == ".." {
			return terminalOutcome(http.StatusBadRequest, fmt.Sprintf("%q cannot be a path segment of the service's URL", name))
		}
	}
	base := svc.Url
	if rec.Url != "" {
		base = rec.Url
	}
	target, err := iv.targets.get(base, inv.Service, inv.Handler)
	if err != nil {
		return terminalOutcome(http.StatusBadGateway, fmt.Sprintf("bad service url %q: %v", base, err))
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, target, bytes.NewReader(inv.Body))
	if err != nil {
		return terminalOutcome(http.StatusBadGateway, fmt.Sprintf("bad service url %q: %v", base, err))
	}
	for _, h := range inv.Headers {
		req.Header.Add(h.Name, h.Value)
	}
	if inv.ContentType != "" {
		req.Header.Set("Content-Type", inv.ContentType)
	}
	id, _ := invocation.IDFromBytes(inv.InvocationId)
	req.Header.Set(headerInvocationID, id.String())
	req.Header.Set(headerAttempt, strconv.FormatUint(uint64(attempt), 10))
	req.Header.Set(headerAttemptID, attemptID)
	if inv.IdempotencyKey != "" {
		req.Header.Set(headerIdempotencyKey, inv.IdempotencyKey)
	}
	if inv.Key != "" {
		req.Header.Set(headerKey, inv.Key)
	}
	if sid, at := scheduleHeaders(inv); sid != "" {
		req.Header.Set(headerSchedule, sid)
		req.Header.Set(headerScheduledTime, at)
	}
	resp, err := iv.p.client.Do(req)
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return retryOutcome(http.StatusGatewayTimeout, fmt.Sprintf("no answer within %v", timeout))
		}
		return retryOutcome(http.StatusBadGateway, fmt.Sprintf("calling service: %v", err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, iv.cfg.MaxResultBytes+1))
	if err != nil {
		return retryOutcome(http.StatusBadGateway, fmt.Sprintf("reading answer: %v", err))
	}
	if int64(len(body)) > iv.cfg.MaxResultBytes {
		return terminalOutcome(http.StatusBadGateway, fmt.Sprintf("answer larger than %d bytes", iv.cfg.MaxResultBytes))
	}
	res := &rpc.Result{Status: uint32(resp.StatusCode), Body: body, ContentType: resp.Header.Get("Content-Type")}
	out := attemptOutcome{outcome: outbox.Classify(resp.StatusCode), result: res}
	switch out.outcome {
	case outbox.Terminal:
		res.Failed = true
	case outbox.Retry:
		out.reason = fmt.Sprintf("service answered %d", resp.StatusCode)
		out.retryAfter, _ = outbox.ParseRetryAfter(resp.Header.Get("Retry-After"), iv.p.now())
	}
	return out
}

// targetCache remembers the URL each (service URL, service, handler) is
// called at: parsing, escaping and joining it cost more allocations than
// the rest of a request's preparation. Bounded: emptied when full.
type targetCache struct {
	mu   sync.Mutex
	urls map[targetKey]string // guarded by mu
}

type targetKey struct{ base, service, handler string }

const maxCachedTargets = 1024

// get returns {base}/{service}/{handler}, each name escaped into one path
// segment.
func (c *targetCache) get(base, service, handler string) (string, error) {
	k := targetKey{base, service, handler}
	c.mu.Lock()
	target, ok := c.urls[k]
	c.mu.Unlock()
	if ok {
		return target, nil
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	target = u.JoinPath(url.PathEscape(service), url.PathEscape(handler)).String()
	c.mu.Lock()
	if c.urls == nil || len(c.urls) >= maxCachedTargets {
		c.urls = make(map[targetKey]string)
	}
	c.urls[k] = target
	c.mu.Unlock()
	return target, nil
}

func retryOutcome(status uint32, reason string) attemptOutcome {
	return attemptOutcome{outcome: outbox.Retry, reason: reason, result: &rpc.Result{Status: status, Failed: true, Error: reason}}
}

func terminalOutcome(status uint32, reason string) attemptOutcome {
	return attemptOutcome{outcome: outbox.Terminal, reason: reason, result: &rpc.Result{Status: status, Failed: true, Error: reason}}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
