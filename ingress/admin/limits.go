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
	// The handlers' retry policies are in svc.HandlerConfig already (one
	// entry per handler of req.HandlerConfig); their limits join them.
	for _, hc := range svc.HandlerConfig {
		name := hc.GetHandler()
		l, err := validateLimits("handlerConfig."+name+".limits", req.HandlerConfig[name].Limits)
		if err != nil {
			return err
		}
		if l == nil && hc.GetRetry() == nil {
			return fmt.Errorf("handlerConfig.%s is empty: give \"limits\" or \"retry\", or leave the handler out", name)
		}
		hc.Limits = l
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
