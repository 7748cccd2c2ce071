package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// maxServiceBody bounds a PUT /services body; a registration is tiny.
const maxServiceBody = 64 << 10

// ServiceView is the JSON form of a registered service.
type ServiceView struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Handlers is empty when every handler is accepted.
	Handlers []string `json:"handlers"`
	// Kind is service, object or workflow.
	Kind string `json:"kind"`
	// Shared lists the handlers of an object or workflow that do not wait
	// for the key; omitted when none.
	Shared []string `json:"shared,omitempty"`
	// UpdatedAt is RFC 3339, empty when unknown.
	UpdatedAt string `json:"updatedAt,omitempty"`
	// Retry is the retry policy in force for the service's deliveries: its
	// registration's fields, the cluster's defaults for the others.
	Retry RetryView `json:"retry"`
	// CallbackURL is the default completion callback of the service's
	// invocations that name none (x-raftgate-callback).
	CallbackURL string `json:"callbackUrl,omitempty"`
	// HandlerConfig is each configured handler's retry policy in force.
	HandlerConfig map[string]HandlerConfigView `json:"handlerConfig,omitempty"`
	// RejectReusedIdempotencyKeys: see ServiceRequest.
	RejectReusedIdempotencyKeys bool `json:"rejectReusedIdempotencyKeys,omitempty"`
	// Limits and PerKeyConcurrency are flow control as registered (enforced by
	// the partitions' invokers, partition/flow.go); a handler's limits are in HandlerConfig.
	Limits            *LimitsView `json:"limits,omitempty"`
	PerKeyConcurrency uint32      `json:"perKeyConcurrency,omitempty"`
	// Backlog is where the service's deliveries are, summed over the
	// partitions (GET /services/{name} alone). When some partition's
	// leader did not answer, BacklogError says why instead: the
	// registration is still shown.
	Backlog      *BacklogView `json:"backlog,omitempty"`
	BacklogError string       `json:"backlogError,omitempty"`
}

// BacklogView is a service's backlog over every partition, as their
// leaders count it (partition/backlog.go).
type BacklogView struct {
	InFlight        uint64 `json:"inFlight"`
	WaitingForLimit uint64 `json:"waitingForLimit"`
	WaitingForRetry uint64 `json:"waitingForRetry"`
	Paused          uint64 `json:"paused"`
	// OldestWaitingAge is how long the longest-waiting due delivery has
	// been due, in Go syntax ("1.5s"); "0s" when none waits.
	OldestWaitingAge string `json:"oldestWaitingAge"`
	// OldestWaitingAgeMs is the same in milliseconds.
	OldestWaitingAgeMs int64 `json:"oldestWaitingAgeMs"`
	// Truncated: some partition's count stopped at its bound
	// (partition.BacklogScanLimit outbox entries); the counts are lower
	// bounds.
	Truncated bool `json:"truncated,omitempty"`
}

// LimitsView is a service's or handler's flow-control limits; 0 (or
// absent) means no limit.
type LimitsView struct {
	Concurrency   uint32  `json:"concurrency,omitempty"`
	RatePerSecond float64 `json:"ratePerSecond,omitempty"`
	Burst         uint32  `json:"burst,omitempty"`
}

// RetryView is a retry policy in JSON; durations in Go syntax ("100ms").
type RetryView struct {
	MaxAttempts    uint32 `json:"maxAttempts"`
	InitialBackoff string `json:"initialBackoff"`
	MaxBackoff     string `json:"maxBackoff"`
	AttemptTimeout string `json:"attemptTimeout"`
	// OnMaxAttempts is pause (keep the invocation, paused, for an
	// operator) or fail (record a terminal failure).
	OnMaxAttempts string `json:"onMaxAttempts"`
}

// RetryRequest is the "retry" object of PUT /services/{name}; every field
// is optional (unset: the cluster's default).
type RetryRequest struct {
	MaxAttempts    *uint32 `json:"maxAttempts,omitempty"`
	InitialBackoff string  `json:"initialBackoff,omitempty"`
	MaxBackoff     string  `json:"maxBackoff,omitempty"`
	AttemptTimeout string  `json:"attemptTimeout,omitempty"`
	OnMaxAttempts  string  `json:"onMaxAttempts,omitempty"`
}

// HandlerConfigRequest is one handler's entry of "handlerConfig": fields
// set in its retry replace the service's.
type HandlerConfigRequest struct {
	Retry  *RetryRequest `json:"retry,omitempty"`
	Limits *LimitsView   `json:"limits,omitempty"`
}

// HandlerConfigView is one handler's policy in force.
type HandlerConfigView struct {
	Retry  RetryView   `json:"retry"`
	Limits *LimitsView `json:"limits,omitempty"`
}

var onMaxAttemptsNames = map[rpc.RetryPolicy_OnMaxAttempts]string{
	rpc.RetryPolicy_PAUSE: "pause",
	rpc.RetryPolicy_FAIL:  "fail",
}

// Bounds of a registered retry policy: a typo should not retry for a year.
const (
	maxRetryAttempts = 10_000
	maxRetryDuration = 24 * time.Hour
)

// ServiceList is the JSON form of GET /services.
type ServiceList struct {
	Services []ServiceView `json:"services"`
}

// ServiceRequest is the body of PUT /services/{name}.
type ServiceRequest struct {
	// Name is optional; when given it must equal the path's name.
	Name     string   `json:"name,omitempty"`
	URL      string   `json:"url"`
	Handlers []string `json:"handlers,omitempty"`
	// Kind is service (the default), object or workflow.
	Kind string `json:"kind,omitempty"`
	// Shared lists the handlers of an object or workflow that run
	// alongside the exclusive ones.
	Shared []string `json:"shared,omitempty"`
	// Retry overrides the cluster's default retry policy; optional.
	Retry *RetryRequest `json:"retry,omitempty"`
	// CallbackURL is the default completion callback URL of the service's
	// invocations; optional, checked against the cluster's
	// --callback-allow.
	CallbackURL string `json:"callbackUrl,omitempty"`
	// HandlerConfig overrides the service's retry policy per handler.
	HandlerConfig map[string]HandlerConfigRequest `json:"handlerConfig,omitempty"`
	// RejectReusedIdempotencyKeys answers 422 to a request whose
	// idempotency key was used with another body.
	RejectReusedIdempotencyKeys bool `json:"rejectReusedIdempotencyKeys,omitempty"`
	// Limits and PerKeyConcurrency (keyed services' shared handlers) are
	// flow control; optional. A handler's limits go in HandlerConfig.
	Limits            *LimitsView `json:"limits,omitempty"`
	PerKeyConcurrency uint32      `json:"perKeyConcurrency,omitempty"`
}

// Service kinds as the admin API spells them.
var kindNames = map[rpc.Service_Kind]string{
	rpc.Service_SERVICE:  "service",
	rpc.Service_OBJECT:   "object",
	rpc.Service_WORKFLOW: "workflow",
}

func parseKind(s string) (rpc.Service_Kind, error) {
	if s == "" {
		return rpc.Service_SERVICE, nil
	}
	for k, name := range kindNames {
		if name == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf(`kind %q is unknown: want "service", "object" or "workflow"`, s)
}

func (s *server) serviceView(svc *rpc.Service) ServiceView {
	v := ServiceView{Name: svc.GetName(), URL: svc.GetUrl(), Handlers: svc.GetHandlers(), Kind: kindNames[svc.GetKind()], Shared: svc.GetShared()}
	v.CallbackURL = svc.GetCallbackUrl()
	v.Retry = retryView(s.retryInForce(svc.GetRetry()))
	v.RejectReusedIdempotencyKeys = svc.GetRejectReusedIdempotencyKeys()
	for _, hc := range svc.GetHandlerConfig() {
		if v.HandlerConfig == nil {
			v.HandlerConfig = map[string]HandlerConfigView{}
		}
		v.HandlerConfig[hc.GetHandler()] = HandlerConfigView{Retry: retryView(s.retryInForce(overlay(svc.GetRetry(), hc.GetRetry()))), Limits: limitsView(hc.GetLimits())}
	}
	if v.Handlers == nil {
		v.Handlers = []string{}
	}
	v.Limits = limitsView(svc.GetLimits())
	v.PerKeyConcurrency = svc.GetPerKeyConcurrency()
	if ms := svc.GetUpdatedAtUnixMs(); ms != 0 {
		v.UpdatedAt = formatTime(ms)
	}
	return v
}

func retryView(r *rpc.RetryPolicy) RetryView {
	return RetryView{
		MaxAttempts:    r.GetMaxAttempts(),
		InitialBackoff: msText(r.GetInitialBackoffMs()),
		MaxBackoff:     msText(r.GetMaxBackoffMs()),
		AttemptTimeout: msText(r.GetAttemptTimeoutMs()),
		OnMaxAttempts:  onMaxAttemptsNames[r.GetOnMaxAttempts()],
	}
}

// overlay returns the fields h sets over base (neither changed).
func overlay(base, h *rpc.RetryPolicy) *rpc.RetryPolicy {
	out := &rpc.RetryPolicy{}
	if base != nil {
		out = proto.Clone(base).(*rpc.RetryPolicy)
	}
	if n := h.GetMaxAttempts(); n > 0 {
		out.MaxAttempts = n
	}
	if ms := h.GetInitialBackoffMs(); ms > 0 {
		out.InitialBackoffMs = ms
	}
	if ms := h.GetMaxBackoffMs(); ms > 0 {
		out.MaxBackoffMs = ms
	}
	if ms := h.GetAttemptTimeoutMs(); ms > 0 {
		out.AttemptTimeoutMs = ms
	}
	if o := h.GetOnMaxAttempts(); o != rpc.RetryPolicy_ON_MAX_ATTEMPTS_UNSET {
		out.OnMaxAttempts = o
	}
	return out
}

// catchUp lets this node's registry replica catch up with the metadata
// group's leader before a read, so the admin API reads its own writes (and
// every node's). It answers 503 itself and returns false when it cannot.
func (s *server) catchUp(w http.ResponseWriter, r *http.Request) bool {
	ctx, cancel := s.callContext(r)
	defer cancel()
	if err := s.cfg.Registry.CatchUp(ctx); err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		s.writeError(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
			"this node cannot bring its copy of the service registry up to date with the metadata group's leader (%v), so it cannot say what is registered; retry (or ask another node)", err))
		return false
	}
	return true
}

func (s *server) listServices(w http.ResponseWriter, r *http.Request) {
	if !s.catchUp(w, r) {
		return
	}
	svcs := s.cfg.Registry.List()
	out := ServiceList{Services: make([]ServiceView, 0, len(svcs))}
	for _, svc := range svcs {
		out.Services = append(out.Services, s.serviceView(svc))
	}
	slices.SortFunc(out.Services, func(a, b ServiceView) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

func (s *server) getService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !s.catchUp(w, r) {
		return
	}
	svc, ok := s.cfg.Registry.Lookup(name)
	if !ok {
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("service %q is not registered", name))
		return
	}
	v := s.serviceView(svc)
	if s.cfg.Backlogs != nil {
		if bl, err := s.backlog(r, name); err != nil {
			v.BacklogError = err.Error()
		} else {
			v.Backlog = bl
		}
	}
	writeJSON(w, http.StatusOK, v)
}

// backlog asks every partition's leader at once and sums their answers;
// one failure fails all (a sum with a partition missing would look whole).
// A node older than backlogs answers them as invalid.
func (s *server) backlog(r *http.Request, service string) (*BacklogView, error) {
	ctx, cancel := s.callContext(r)
	defer cancel()
	n := s.cfg.Partitions
	parts := make([]*rpc.ServiceBacklog, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { parts[i], errs[i] = s.cfg.Backlogs.Backlog(ctx, i+1, service) })
	}
	wg.Wait()
	out := &BacklogView{}
	var age int64
	for i, bl := range parts {
		if errs[i] != nil {
			return nil, fmt.Errorf("partition %d: %w", i+1, errs[i])
		}
		out.InFlight += bl.GetInFlight()
		out.WaitingForLimit += bl.GetWaitingForLimit()
		out.WaitingForRetry += bl.GetWaitingForRetry()
		out.Paused += bl.GetPaused()
		out.Truncated = out.Truncated || bl.GetTruncated()
		if bl.GetWaitingForLimit() > 0 {
			// Each leader's own clock: clocks need not agree.
			age = max(age, bl.GetAtUnixMs()-bl.GetOldestWaitingDueUnixMs())
		}
	}
	out.OldestWaitingAgeMs = age
	out.OldestWaitingAge = (time.Duration(age) * time.Millisecond).String()
	return out, nil
}

// putService registers or updates a service: 201 when it was new on this
// node's replica, 200 when it replaced a registration.
func (s *server) putService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	req, err := decodeServiceRequest(w, r)
	if err != nil {
		status := http.StatusBadRequest
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			status = http.StatusRequestEntityTooLarge
		}
		s.writeError(w, r, status, err.Error())
		return
	}
	svc, err := validateService(name, req)
	if err == nil {
		err = s.checkRetryInForce(svc.Retry)
	}
	if err == nil && req.CallbackURL != "" {
		err = s.cfg.CallbackAllow.Check(req.CallbackURL)
		svc.CallbackUrl = req.CallbackURL
	}
	if err != nil {
		s.writeError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	svc.UpdatedAtUnixMs = s.cfg.Now().UnixMilli()
	_, existed := s.cfg.Registry.Lookup(name)

	ctx, cancel := s.callContext(r)
	defer cancel()
	if err := s.cfg.Registry.PutService(ctx, svc); err != nil {
		s.writeCallError(w, r, fmt.Sprintf("register service %q", name), err)
		return
	}
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	writeJSON(w, status, s.serviceView(svc))
}

func (s *server) deleteService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := s.callContext(r)
	defer cancel()
	if err := s.cfg.Registry.DeleteService(ctx, name); err != nil {
		if errors.Is(err, rpc.ErrNotFound) {
			s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("service %q is not registered", name))
			return
		}
		s.writeCallError(w, r, fmt.Sprintf("remove service %q", name), err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func decodeServiceRequest(w http.ResponseWriter, r *http.Request) (ServiceRequest, error) {
	var req ServiceRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxServiceBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return req, errors.New(`body must be JSON like {"url": "http://host:port", "handlers": ["greet"]}`)
		}
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			return req, fmt.Errorf("body over %d bytes: %w", maxServiceBody, err)
		}
		return req, fmt.Errorf(`body is not a service registration {"url", "handlers", "retry"}: %v`, err)
	}
	if dec.More() {
		return req, errors.New("body has data after the JSON object")
	}
	return req, nil
}

// validateService checks a registration and returns it in stored form: the
// URL without trailing slashes (raftgate appends /{service}/{handler}).
func validateService(name string, req ServiceRequest) (*rpc.Service, error) {
	if err := registry.ValidateServiceName(name); err != nil {
		return nil, err
	}
	if req.Name != "" && req.Name != name {
		return nil, fmt.Errorf("body names service %q but the path names %q", req.Name, name)
	}
	base, err := ValidateServiceURL(req.URL)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(req.Handlers))
	for _, h := range req.Handlers {
		if err := registry.ValidateHandlerName(h); err != nil {
			return nil, err
		}
		if seen[h] {
			return nil, fmt.Errorf("handler %q is listed twice", h)
		}
		seen[h] = true
	}
	kind, err := parseKind(req.Kind)
	if err != nil {
		return nil, err
	}
	retry, err := validateRetry(req.Retry)
	if err != nil {
		return nil, err
	}
	svc := &rpc.Service{Name: name, Url: base, Handlers: slices.Clone(req.Handlers), Kind: kind, Shared: slices.Clone(req.Shared), Retry: retry,
		RejectReusedIdempotencyKeys: req.RejectReusedIdempotencyKeys}
	for _, h := range slices.Sorted(maps.Keys(req.HandlerConfig)) {
		if err := registry.ValidateHandlerName(h); err != nil {
			return nil, fmt.Errorf("handlerConfig: %w", err)
		}
		if len(req.Handlers) > 0 && !seen[h] {
			return nil, fmt.Errorf("handlerConfig: handler %q is not in handlers", h)
		}
		hr, err := validateRetry(req.HandlerConfig[h].Retry)
		if err != nil {
			return nil, fmt.Errorf("handlerConfig.%s.%w", h, err)
		}
		svc.HandlerConfig = append(svc.HandlerConfig, &rpc.HandlerConfig{Handler: h, Retry: hr})
	}
	if err := registry.CheckKind(svc); err != nil {
		return nil, err
	}
	if err := validateFlowControl(svc, req); err != nil {
		return nil, err
	}
	return svc, nil
}

// validateRetry checks a registration's "retry" object; nil when absent.
func validateRetry(req *RetryRequest) (*rpc.RetryPolicy, error) {
	if req == nil {
		return nil, nil
	}
	var p rpc.RetryPolicy
	if n := req.MaxAttempts; n != nil {
		if *n < 1 || *n > maxRetryAttempts {
			return nil, fmt.Errorf("retry.maxAttempts %d is out of range 1..%d (leave it out for the cluster's default)", *n, maxRetryAttempts)
		}
		p.MaxAttempts = *n
	}
	for _, f := range []struct {
		name, text string
		ms         *int64
	}{
		{"initialBackoff", req.InitialBackoff, &p.InitialBackoffMs},
		{"maxBackoff", req.MaxBackoff, &p.MaxBackoffMs},
		{"attemptTimeout", req.AttemptTimeout, &p.AttemptTimeoutMs},
	} {
		if f.text == "" {
			continue
		}
		d, err := time.ParseDuration(f.text)
		if err != nil || d < time.Millisecond || d > maxRetryDuration {
			return nil, fmt.Errorf("retry.%s %q must be a duration from 1ms to %v, like \"500ms\" or \"30s\"", f.name, f.text, maxRetryDuration)
		}
		*f.ms = d.Milliseconds()
	}
	switch req.OnMaxAttempts {
	case "":
	case "pause":
		p.OnMaxAttempts = rpc.RetryPolicy_PAUSE
	case "fail":
		p.OnMaxAttempts = rpc.RetryPolicy_FAIL
	default:
		return nil, fmt.Errorf(`retry.onMaxAttempts %q: want "pause" or "fail"`, req.OnMaxAttempts)
	}
	if p.InitialBackoffMs > 0 && p.MaxBackoffMs > 0 && p.InitialBackoffMs > p.MaxBackoffMs {
		return nil, fmt.Errorf("retry.initialBackoff %s is above retry.maxBackoff %s", req.InitialBackoff, req.MaxBackoff)
	}
	return &p, nil
}

// retryInForce fills the policy's unset fields with the cluster's
// defaults.
func (s *server) retryInForce(p *rpc.RetryPolicy) *rpc.RetryPolicy {
	if s.cfg.RetryInForce == nil {
		return p
	}
	return s.cfg.RetryInForce(p)
}

// checkRetryInForce refuses a policy that overrides one end of the backoff
// only and so crosses the cluster's other end (an initial backoff above
// its maximum, or a maximum below its initial one), which the invoker
// would resolve silently.
func (s *server) checkRetryInForce(p *rpc.RetryPolicy) error {
	if p == nil || s.cfg.RetryInForce == nil {
		return nil
	}
	d := s.cfg.RetryInForce(nil)
	initial, maxBackoff := d.GetInitialBackoffMs(), d.GetMaxBackoffMs()
	if ms := p.GetInitialBackoffMs(); ms > 0 {
		initial = ms
	}
	if ms := p.GetMaxBackoffMs(); ms > 0 {
		maxBackoff = ms
	}
	if initial > maxBackoff {
		return fmt.Errorf("retry: the initial backoff %s would be above the maximum backoff %s (the cluster's default for the one not given); give both",
			msText(initial), msText(maxBackoff))
	}
	return nil
}

// msText prints milliseconds as a Go duration ("" for 0: not set).
func msText(ms int64) string {
	if ms == 0 {
		return ""
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// ValidateServiceURL checks a service's base URL (absolute http or https,
// with a host, no query or fragment) and returns it without trailing slashes.
func ValidateServiceURL(raw string) (string, error) {
	if raw == "" {
		return "", errors.New(`"url" is required: the service's base URL, like http://127.0.0.1:9080`)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url %q is not a URL: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("url %q must be absolute http:// or https://", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("url %q has no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("url %q must not have a query or fragment", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}

// formatTime prints a Unix-millisecond timestamp as RFC 3339 in UTC.
func formatTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
