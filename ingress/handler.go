package ingress

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Handler serves the ingress API. It is an http.Handler, safe for
// concurrent use.
type Handler struct {
	cfg     Config
	log     zerolog.Logger
	metrics *metrics
	// slots holds one token per request being served; a full channel means
	// the ingress is at MaxConcurrent and sheds.
	slots chan struct{}
	// draining is set by Drain: new requests get 503.
	draining atomic.Bool
	// stopWaiting is cancelled by StopWaiting: waits for results end.
	stopWaiting    context.Context
	stopWaitingNow context.CancelFunc
	// retryAfter is the Retry-After header value, in seconds.
	retryAfter string
	// tokens is the set of API tokens; nil: authentication is off.
	tokens atomic.Pointer[Tokens]
	// forward maps the canonical names of Config.ForwardHeaders to the
	// lower-case names sent to the service.
	forward map[string]string
	// fresh counts the invocations given a partition led here (freshID).
	fresh atomic.Uint64
}

// New returns a Handler for cfg.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := &Handler{
		cfg:        cfg,
		log:        cfg.Logger.With().Str("component", "ingress").Logger(),
		slots:      make(chan struct{}, cfg.MaxConcurrent),
		retryAfter: strconv.Itoa(int(max(1, math.Ceil(cfg.RetryAfter.Seconds())))),
	}
	m, err := newMetrics(cfg.Registerer, func() float64 { return float64(len(h.slots)) })
	if err != nil {
		return nil, fmt.Errorf("ingress metrics: %w", err)
	}
	h.metrics = m
	h.stopWaiting, h.stopWaitingNow = context.WithCancel(context.Background())
	h.tokens.Store(cfg.Tokens)
	if len(cfg.ForwardHeaders) > 0 {
		h.forward = make(map[string]string, len(cfg.ForwardHeaders))
		for _, name := range cfg.ForwardHeaders {
			h.forward[http.CanonicalHeaderKey(name)] = lowerASCII(name)
		}
	}
	return h, nil
}

// Drain starts a graceful shutdown: from now on every new request gets 503
// with Retry-After (retrying it, at another node, is safe because nothing
// was done), while requests already being served finish normally. Pair it
// with http.Server.Shutdown, which waits for them.
func (h *Handler) Drain() { h.draining.Store(true) }

// SetTokens replaces the API tokens (a reload of the token file); requests
// that arrive afterwards are checked against t. nil turns authentication
// off.
func (h *Handler) SetTokens(t *Tokens) { h.tokens.Store(t) }

// StopWaiting answers every request still waiting for a result (calls
// past their append, attaches) at once with 503, Retry-After and the
// invocation id in x-restate-id; the invocations themselves keep running
// and can be attached to at another node. Call it after Drain when the
// shutdown grace period is nearly over, so that long-polls end with an
// answer rather than a closed connection. Later waits end at once too.
func (h *Handler) StopWaiting() { h.stopWaitingNow() }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	kind := routeOther
	code := 0
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).
				Str("method", r.Method).Str("path", r.URL.Path).Msg("ingress handler panicked")
			code = http.StatusInternalServerError
			// If the answer had started this write is refused; the client
			// then sees a broken response, which is all that can be done.
			writeJSONError(w, code, "internal error in the ingress; retrying with the same idempotency-key is safe", sourceIngress)
		}
		h.metrics.observe(kind, code, time.Since(start))
	}()
	kind, code = h.serve(w, r)
}

// serve answers r and returns its route and the status written.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) (routeKind, int) {
	if origin := r.Header.Get("Origin"); origin != "" {
		if preflight := corsHeaders(w.Header(), r, origin); preflight {
			w.WriteHeader(http.StatusOK)
			return routeOther, http.StatusOK
		}
	}
	rt, perr := parsePath(r.URL.EscapedPath())
	if perr != nil {
		return routeOther, h.writeError(w, perr)
	}
	if rt.kind == routeHealth {
		return routeHealth, h.health(w, r)
	}
	grant, e := h.authenticate(r)
	if e == nil && rt.target {
		rt, e = h.readTarget(w, r, rt)
	}
	if e == nil {
		e = authorize(grant, rt)
	}
	if e != nil {
		return rt.kind, h.writeError(w, e)
	}
	if h.draining.Load() {
		w.Header().Set("Connection", "close")
		return rt.kind, h.writeError(w, &apiError{code: http.StatusServiceUnavailable, retryAfter: true,
			msg: "this ingress is shutting down and accepted nothing; retry (at another node) is safe"})
	}
	var body []byte
	if rt.kind == routeCall || rt.kind == routeSend {
		if r.Method != http.MethodPost {
			return rt.kind, h.writeError(w, errMethod(http.MethodPost))
		}
		// The body is read before a slot is taken: a client that trickles
		// its body then holds its own connection only (for at most
		// BodyReadTimeout), never a slot others need.
		var e *apiError
		if body, e = h.readBody(w, r); e != nil {
			return rt.kind, h.writeError(w, e)
		}
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		return rt.kind, h.writeError(w, &apiError{code: http.StatusTooManyRequests, retryAfter: true,
			msg: fmt.Sprintf("the ingress is at its concurrency limit (%d requests); nothing was done, retry later", h.cfg.MaxConcurrent)})
	}
	switch rt.kind {
	case routeCall, routeSend:
		return rt.kind, h.invoke(w, r, rt, body)
	case routeAttach, routeOutput, routeLookup:
		if !rt.target && r.Method != http.MethodGet && r.Method != http.MethodHead {
			return rt.kind, h.writeError(w, errMethod("GET, HEAD"))
		}
		return rt.kind, h.lookup(w, r, rt, grant)
	case routeCancel:
		if r.Method != http.MethodPatch {
			return rt.kind, h.writeError(w, errMethod(http.MethodPatch))
		}
		return rt.kind, h.cancel(w, r, rt, grant)
	}
	return rt.kind, h.writeError(w, errNotFound("no such endpoint"))
}

// health answers GET /restate/health: 200 while serving, 503 once draining
// (so that load balancers stop sending traffic).
func (h *Handler) health(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return h.writeError(w, errMethod("GET, HEAD"))
	}
	if h.draining.Load() {
		return h.writeError(w, &apiError{code: http.StatusServiceUnavailable, retryAfter: true, msg: "this ingress is shutting down"})
	}
	w.Header().Set(headerContentType, "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"status":"ok"}`))
	return http.StatusOK
}

// exposedHeaders are the response headers a browser client may read.
const exposedHeaders = "x-restate-id, x-restate-error-source, idempotency-expires, retry-after"

// corsHeaders applies a permissive CORS policy, as Restate's ingress does
// (any origin, credentials allowed, requested methods and headers mirrored),
// and reports whether r is a preflight request that is now answered.
func corsHeaders(hdr http.Header, r *http.Request, origin string) bool {
	hdr.Set("Access-Control-Allow-Origin", origin)
	hdr.Set("Access-Control-Allow-Credentials", "true")
	hdr.Add("Vary", "Origin")
	reqMethod := r.Header.Get("Access-Control-Request-Method")
	if r.Method != http.MethodOptions || reqMethod == "" {
		hdr.Set("Access-Control-Expose-Headers", exposedHeaders)
		return false
	}
	hdr.Add("Vary", "Access-Control-Request-Method")
	hdr.Add("Vary", "Access-Control-Request-Headers")
	hdr.Set("Access-Control-Allow-Methods", reqMethod)
	if reqHeaders := r.Header.Get("Access-Control-Request-Headers"); reqHeaders != "" {
		hdr.Set("Access-Control-Allow-Headers", reqHeaders)
	}
	hdr.Set("Access-Control-Max-Age", "600")
	return true
}

// lowerASCII lower-cases an ASCII header name.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
