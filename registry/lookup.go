package registry

import (
	"context"
	"time"

	"github.com/raftgate/raftgate/rpc"
)

// The lookups of the node's readers, each with the consistency its reader
// needs: a registry read that must be current catches up with the
// metadata group's leader first, bounded by CatchUpTimeout.

// CatchUpTimeout bounds how long a registry read waits for this replica
// to catch up with the metadata group's leader before it answers that it
// cannot tell (the ingress and the admin API then answer 503): the
// ingress's on a miss, the invoker's on a miss, the admin API's before GET
// /services. The read index travels on the same peer streams as the
// partitions' appends, so under load it waits behind them as long as an
// append does.
const CatchUpTimeout = 2 * time.Second

// IngressLookup is the ingress's service lookup. A hit in this node's
// replica is answered at once when the registration carries the index it
// was applied at: the partition refuses the invocation if the service
// changed since (a change is answered only after every partition was
// fenced at it, Writer), so a removal answered through another node still
// gets its 404 without a read round on every call. A miss, or a
// registration from before indexes existed, first catches up with the
// metadata group's leader, so a service registered through another node a
// moment ago is found.
type IngressLookup struct{ Registry *Registry }

// Lookup answers from this replica on a hit, after a catch-up otherwise.
func (l IngressLookup) Lookup(ctx context.Context, name string) (*rpc.Service, error) {
	if svc, ok := l.Registry.Lookup(name); ok && svc.GetRegisteredIndex() != 0 {
		return svc, nil
	}
	return l.LookupCurrent(ctx, name)
}

// LookupCurrent answers after catching up, hit or miss.
func (l IngressLookup) LookupCurrent(ctx context.Context, name string) (*rpc.Service, error) {
	ctx, cancel := context.WithTimeout(ctx, CatchUpTimeout)
	defer cancel()
	return l.Registry.LookupCurrent(ctx, name)
}

// InvokerLookup is the invoker's service lookup. A service this replica
// holds is delivered to at once: the ingress only accepted the invocation
// after a catch-up, and a removal answered since reaches this replica
// within a round trip, after which the next delivery fails for good. A
// miss catches up first (the registration may not have reached this
// replica yet) and is then a removal; when the replica cannot catch up,
// the delivery is retried later rather than failed.
type InvokerLookup struct{ Registry *Registry }

// Lookup answers from this replica on a hit, after a catch-up otherwise.
func (l InvokerLookup) Lookup(ctx context.Context, name string) (*rpc.Service, error) {
	if svc, ok := l.Registry.Lookup(name); ok {
		return svc, nil
	}
	ctx, cancel := context.WithTimeout(ctx, CatchUpTimeout)
	defer cancel()
	return l.Registry.LookupCurrent(ctx, name)
}

// Registered returns the service as this replica holds it, without
// waiting (the invoker's flow control, partition.FlowRules).
func (l InvokerLookup) Registered(name string) (*rpc.Service, bool) { return l.Registry.Lookup(name) }

// RuleFor returns the enabled scope rule that applies to scope.
func (l InvokerLookup) RuleFor(scope string) (*rpc.Rule, bool) { return l.Registry.RuleFor(scope) }

// HasRules reports whether any scope rule exists.
func (l InvokerLookup) HasRules() bool { return l.Registry.HasRules() }
