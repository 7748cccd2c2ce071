package client

import (
	"net/http"
	"net/url"
	"time"
)

// Option configures the client (given to New) or one request (given to a
// method); a request's options add to or override the client's.
type Option func(*options)

type options struct {
	httpClient     *http.Client
	header         http.Header
	idempotencyKey string
	key            string
	delay          time.Duration
	timeout        time.Duration
	contentType    string
}

func (o *options) apply(opts []Option) {
	for _, opt := range opts {
		opt(o)
	}
}

// timeoutQuery is the ?timeout= of Call and Attach.
func (o *options) timeoutQuery() map[string][]string {
	if o.timeout <= 0 {
		return nil
	}
	return map[string][]string{"timeout": {o.timeout.String()}}
}

// WithHTTPClient sends requests with hc instead of http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.httpClient = hc } }

// WithHeader adds a request header (e.g. authorization for a proxy).
func WithHeader(name, value string) Option {
	return func(o *options) {
		if o.header == nil {
			o.header = http.Header{}
		}
		o.header.Add(name, value)
	}
}

// WithIdempotencyKey de-duplicates the invocation by (service, handler,
// key) for the retention window: retries with the same key are safe and get
// the original invocation and result. Call and Send only.
func WithIdempotencyKey(key string) Option { return func(o *options) { o.idempotencyKey = key } }

// WithKey addresses a handler of one virtual object (its key) or one
// workflow (its id): the request goes to /service/key/handler. Call and
// Send only.
func WithKey(key string) Option { return func(o *options) { o.key = key } }

// handlerPath is the ingress path of service/handler, with the key of
// WithKey between them.
func (o *options) handlerPath(service, handler string) string {
	if o.key != "" {
		return "/" + url.PathEscape(service) + "/" + url.PathEscape(o.key) + "/" + url.PathEscape(handler)
	}
	return "/" + url.PathEscape(service) + "/" + url.PathEscape(handler)
}

// WithDelay runs a sent invocation no earlier than now+d. Send only.
func WithDelay(d time.Duration) Option { return func(o *options) { o.delay = d } }

// WithTimeout bounds how long Call or Attach waits for the result; when it
// passes the error matches ErrNotReady and the invocation keeps running.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithContentType sets the content type of the body (default
// application/json).
func WithContentType(ct string) Option { return func(o *options) { o.contentType = ct } }
