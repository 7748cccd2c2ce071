package admin

import (
	"fmt"
	"math"
	"slices"

	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// Bounds of registered limits: a typo should not read as "unlimited".
const (
	maxConcurrencyLimit = 1_000_000
	maxRatePerSecond    = 1_000_000
)

// validateFlowControl checks the registration's limits, per-handler
// configs and perKeyConcurrency and stores them in svc.
func validateFlowControl(svc *rpc.Service, req ServiceRequest) error {
	l, err := validateLimits("limits", req.Limits)
	if err != nil {
		return err
	}
	svc.Limits = l
	for name, hc := range req.HandlerConfig {
		if err := ValidateHandlerName(name); err != nil {
			return fmt.Errorf("handlerConfig: %v", err)
		}
		if len(svc.Handlers) > 0 && !slices.Contains(svc.Handlers, name) {
			return fmt.Errorf("handlerConfig names handler %q, which is not one of the registration's handlers %v", name, svc.Handlers)
		}
		l, err := validateLimits("handlerConfig."+name+".limits", hc.Limits)
		if err != nil {
			return err
		}
		retry, err := validateRetry(hc.Retry)
		if err != nil {
			return fmt.Errorf("handlerConfig.%s.%v", name, err)
		}
		if l == nil && retry == nil {
			return fmt.Errorf("handlerConfig.%s is empty: give \"limits\" or \"retry\", or leave the handler out", name)
		}
		if svc.HandlerConfig == nil {
			svc.HandlerConfig = make(map[string]*rpc.HandlerConfig)
		}
		svc.HandlerConfig[name] = &rpc.HandlerConfig{Limits: l, Retry: retry}
	}
	if n := req.PerKeyConcurrency; n != 0 {
		switch {
		case svc.Kind == rpc.Service_SERVICE:
			return fmt.Errorf("perKeyConcurrency %d: a plain service has no keys (kind object or workflow)", n)
		case !hasSharedHandlers(svc):
			return fmt.Errorf("perKeyConcurrency %d: applies to a keyed service's shared handlers, and %q has none (exclusive handlers already run one per key)", n, svc.Name)
		case n > maxConcurrencyLimit:
			return fmt.Errorf("perKeyConcurrency %d is above %d", n, maxConcurrencyLimit)
		}
		svc.PerKeyConcurrency = n
	}
	return nil
}

// hasSharedHandlers: a workflow's handlers but run are shared.
func hasSharedHandlers(svc *rpc.Service) bool {
	if svc.Kind == rpc.Service_WORKFLOW {
		return len(svc.Handlers) == 0 || slices.ContainsFunc(svc.Handlers, func(h string) bool { return h != registry.WorkflowRun })
	}
	return len(svc.Shared) > 0
}

// validateLimits checks one "limits" object; nil when absent.
func validateLimits(field string, v *LimitsView) (*rpc.Limits, error) {
	if v == nil {
		return nil, nil
	}
	switch {
	case v.Concurrency > maxConcurrencyLimit:
		return nil, fmt.Errorf("%s.concurrency %d is above %d", field, v.Concurrency, maxConcurrencyLimit)
	case math.IsNaN(v.RatePerSecond) || v.RatePerSecond < 0 || v.RatePerSecond > maxRatePerSecond:
		return nil, fmt.Errorf("%s.ratePerSecond %v must be from 0 (no rate limit) to %d", field, v.RatePerSecond, maxRatePerSecond)
	case v.Burst > 0 && v.RatePerSecond == 0:
		return nil, fmt.Errorf("%s.burst %d needs a ratePerSecond: it is the token bucket's size", field, v.Burst)
	case v.Burst > maxConcurrencyLimit:
		return nil, fmt.Errorf("%s.burst %d is above %d", field, v.Burst, maxConcurrencyLimit)
	case v.Concurrency == 0 && v.RatePerSecond == 0:
		return nil, fmt.Errorf("%s is empty: give \"concurrency\" or \"ratePerSecond\" (0 means no limit: leave the object out)", field)
	}
	return &rpc.Limits{Concurrency: v.Concurrency, RatePerSecond: v.RatePerSecond, Burst: v.Burst}, nil
}

func limitsView(l *rpc.Limits) *LimitsView {
	if l == nil {
		return nil
	}
	return &LimitsView{Concurrency: l.GetConcurrency(), RatePerSecond: l.GetRatePerSecond(), Burst: l.GetBurst()}
}

// retryRequest is a registered retry policy in the request's form (the
// fields it sets).
func retryRequest(p *rpc.RetryPolicy) *RetryRequest {
	if p == nil {
		return nil
	}
	r := &RetryRequest{InitialBackoff: msText(p.GetInitialBackoffMs()), MaxBackoff: msText(p.GetMaxBackoffMs()),
		AttemptTimeout: msText(p.GetAttemptTimeoutMs())}
	if n := p.GetMaxAttempts(); n > 0 {
		r.MaxAttempts = &n
	}
	return r
}
