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
	"strings"
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

// Header names of the service protocol (API.md, "How raftgate calls a
// service").
const (
	headerInvocationID   = "x-restate-id"
	headerAttempt        = "x-raftgate-attempt"
	headerIdempotencyKey = "idempotency-key"
	headerKey            = "x-raftgate-key"
)

// call makes one HTTP attempt of inv.
func (iv *invoker) call(ctx context.Context, inv *rpc.Invoke, attempt uint32) attemptOutcome {
	svc, ok := iv.p.cfg.Services.Lookup(inv.Service)
	if !ok {
		// It may be registered soon: retry, then give up as a 404.
		return retryOutcome(http.StatusNotFound, fmt.Sprintf("service %q is not registered", inv.Service))
	}
	if len(svc.Handlers) > 0 && !slices.Contains(svc.Handlers, inv.Handler) {
		return terminalOutcome(http.StatusNotFound, fmt.Sprintf("handler %q of service %q is not registered", inv.Handler, inv.Service))
	}
	target := strings.TrimSuffix(svc.Url, "/") + "/" + url.PathEscape(inv.Service) + "/" + url.PathEscape(inv.Handler)
	cctx, cancel := context.WithTimeout(ctx, iv.cfg.HTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, target, bytes.NewReader(inv.Body))
	if err != nil {
		return terminalOutcome(http.StatusBadGateway, fmt.Sprintf("bad service url %q: %v", svc.Url, err))
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
	if inv.IdempotencyKey != "" {
		req.Header.Set(headerIdempotencyKey, inv.IdempotencyKey)
	}
	if inv.Key != "" {
		req.Header.Set(headerKey, inv.Key)
	}
	resp, err := iv.p.client.Do(req)
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return retryOutcome(http.StatusGatewayTimeout, fmt.Sprintf("no answer within %v", iv.cfg.HTTPTimeout))
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

func retryOutcome(status uint32, reason string) attemptOutcome {
	return attemptOutcome{outcome: outbox.Retry, reason: reason, result: &rpc.Result{Status: status, Failed: true, Error: reason}}
}

func terminalOutcome(status uint32, reason string) attemptOutcome {
	return attemptOutcome{outcome: outbox.Terminal, reason: reason, result: &rpc.Result{Status: status, Failed: true, Error: reason}}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
