package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// StatusNotReady is the status of "no result yet" (output of an unfinished
// invocation, or a call or attach whose timeout passed).
const StatusNotReady = 470

// Client calls one raftgate ingress. It is safe for concurrent use.
type Client struct {
	base     string // without trailing slash
	defaults options
}

// Response is a successful answer carrying an invocation's result.
type Response struct {
	// Status is the HTTP status the service answered with (2xx).
	Status int
	// Body and ContentType are the service's answer.
	Body        []byte
	ContentType string
	// InvocationID is the invocation's id (x-restate-id).
	InvocationID string
	// IdempotencyExpires is when the result of an invocation with an
	// idempotency key stops being kept (zero when not reported).
	IdempotencyExpires time.Time
	// Header holds all response headers.
	Header http.Header
}

// SendResult is the answer to Send.
type SendResult struct {
	// InvocationID identifies the invocation; pass it to Attach or Output.
	InvocationID string `json:"invocationId"`
	// Status is "Accepted", or "PreviouslyAccepted" when the idempotency
	// key had been seen.
	Status string `json:"status"`
	// ExecutionTime is when a delayed invocation runs (zero without delay).
	ExecutionTime time.Time `json:"executionTime"`
}

// New returns a client of the ingress at baseURL (e.g.
// "http://127.0.0.1:8080"). Options given here apply to every request;
// options given to a request add to or override them.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	c := &Client{base: strings.TrimSuffix(baseURL, "/")}
	c.defaults.apply(opts)
	return c, nil
}

// Call invokes service/handler with body and waits for the result. With
// WithTimeout, a result not ready in time gives an *Error matching
// ErrNotReady whose InvocationID can be passed to Attach.
func (c *Client) Call(ctx context.Context, service, handler string, body []byte, opts ...Option) (*Response, error) {
	o := c.options(opts)
	return c.do(ctx, http.MethodPost, o.handlerPath(service, handler), o.timeoutQuery(), body, o)
}

// Send submits an invocation of service/handler without waiting for it.
// WithDelay runs it no earlier than now+delay.
func (c *Client) Send(ctx context.Context, service, handler string, body []byte, opts ...Option) (*SendResult, error) {
	o := c.options(opts)
	path := o.handlerPath(service, handler) + "/send"
	var q url.Values
	if o.delay > 0 {
		q = url.Values{"delay": {o.delay.String()}}
	}
	resp, err := c.do(ctx, http.MethodPost, path, q, body, o)
	if err != nil {
		return nil, err
	}
	var sr SendResult
	if err := json.Unmarshal(resp.Body, &sr); err != nil {
		return nil, fmt.Errorf("client: decoding send answer %q: %w", resp.Body, err)
	}
	return &sr, nil
}

// Attach waits for the result of an invocation. With WithTimeout, it gives
// up after that long with an *Error matching ErrNotReady.
func (c *Client) Attach(ctx context.Context, invocationID string, opts ...Option) (*Response, error) {
	o := c.options(opts)
	return c.do(ctx, http.MethodGet, "/restate/invocation/"+url.PathEscape(invocationID)+"/attach", o.timeoutQuery(), nil, o)
}

// Output returns the result of an invocation if it exists; an *Error
// matching ErrNotReady if it has not completed, ErrNotFound if there is no
// such invocation (or its result was purged).
func (c *Client) Output(ctx context.Context, invocationID string, opts ...Option) (*Response, error) {
	o := c.options(opts)
	return c.do(ctx, http.MethodGet, "/restate/invocation/"+url.PathEscape(invocationID)+"/output", nil, nil, o)
}

// AttachByKey is Attach for the invocation of service/handler with an
// idempotency key.
func (c *Client) AttachByKey(ctx context.Context, service, handler, idempotencyKey string, opts ...Option) (*Response, error) {
	o := c.options(opts)
	return c.do(ctx, http.MethodGet, keyPath(service, handler, idempotencyKey)+"/attach", o.timeoutQuery(), nil, o)
}

// OutputByKey is Output for the invocation of service/handler with an
// idempotency key.
func (c *Client) OutputByKey(ctx context.Context, service, handler, idempotencyKey string, opts ...Option) (*Response, error) {
	o := c.options(opts)
	return c.do(ctx, http.MethodGet, keyPath(service, handler, idempotencyKey)+"/output", nil, nil, o)
}

func keyPath(service, handler, key string) string {
	return "/restate/invocation/" + url.PathEscape(service) + "/" + url.PathEscape(handler) + "/" + url.PathEscape(key)
}

func (c *Client) options(opts []Option) options {
	o := c.defaults
	o.header = o.header.Clone()
	o.apply(opts)
	return o
}

// do sends one request; non-2xx answers become *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, o options) (*Response, error) {
	target := c.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, vs := range o.header {
		req.Header[k] = vs
	}
	if body != nil {
		ct := o.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if o.idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", o.idempotencyKey)
	}
	hc := o.httpClient
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("client: reading answer of %s %s: %w", method, path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return nil, newError(res, data)
	}
	r := &Response{
		Status:       res.StatusCode,
		Body:         data,
		ContentType:  res.Header.Get("Content-Type"),
		InvocationID: res.Header.Get("X-Restate-Id"),
		Header:       res.Header,
	}
	if exp := res.Header.Get("Idempotency-Expires"); exp != "" {
		r.IdempotencyExpires, _ = time.Parse(time.RFC3339Nano, exp)
	}
	return r, nil
}

// Sentinels matched by *Error with errors.Is.
var (
	// ErrNotReady: the invocation has no result yet (status 470).
	ErrNotReady = errors.New("invocation not ready")
	// ErrNotFound: the ingress knows no such service, handler or
	// invocation (404 from the ingress, not from a service).
	ErrNotFound = errors.New("not found")
)

// Error is an answer other than 2xx.
type Error struct {
	// Code is the HTTP status.
	Code int
	// Message explains the error: the "message" of the JSON error body, or
	// the body itself when it is not one.
	Message string
	// Source is "ingress" for raftgate's own errors and "invocation" for a
	// service's failure (the invocation's recorded result).
	Source string
	// RetryAfter is set (429, 503) when the request may be retried after
	// that long.
	RetryAfter time.Duration
	// InvocationID is x-restate-id, when the answer names an invocation.
	InvocationID string
	// Body is the raw answer body.
	Body []byte
}

func (e *Error) Error() string {
	src := e.Source
	if src == "" {
		src = "unknown source"
	}
	return fmt.Sprintf("raftgate: %d (%s): %s", e.Code, src, e.Message)
}

// Is matches ErrNotReady (470) and ErrNotFound (404 from the ingress).
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotReady:
		return e.Code == StatusNotReady
	case ErrNotFound:
		return e.Code == http.StatusNotFound && e.Source != "invocation"
	}
	return false
}

func newError(res *http.Response, body []byte) *Error {
	e := &Error{
		Code:         res.StatusCode,
		Source:       res.Header.Get("X-Restate-Error-Source"),
		InvocationID: res.Header.Get("X-Restate-Id"),
		Body:         body,
	}
	var jb struct {
		Message *string `json:"message"`
		Source  string  `json:"source"`
	}
	if json.Unmarshal(body, &jb) == nil && jb.Message != nil {
		e.Message = *jb.Message
		if e.Source == "" {
			e.Source = jb.Source
		}
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	if ra := res.Header.Get("Retry-After"); ra != "" {
		if secs, err := strconv.Atoi(ra); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			e.RetryAfter = max(0, time.Until(t))
		}
	}
	return e
}
