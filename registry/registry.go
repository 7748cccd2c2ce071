package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/proposals"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// servicesBucket: service name → marshalled rpc.Service.
var servicesBucket = []byte("services")

// storeMarshal is deterministic: every replica must store the same bytes.
var storeMarshal = proto.MarshalOptions{Deterministic: true}

// Registry is the metadata group's state machine: the service registry. It
// implements raftlog.StateMachine; Lookup and List read the applied state
// from memory and are safe for concurrent use.
type Registry struct {
	logger zerolog.Logger
	now    func() time.Time
	log    MetaLog
	ready  chan struct{} // closed by Start

	mu       sync.RWMutex
	services map[string]*rpc.Service // guarded by mu; replaced, never mutated
	rules    map[string]*rpc.Rule    // guarded by mu; replaced, never mutated

	// tracker matches each Put and Delete to its applied entry by request
	// id and term; the reply is the entry's index.
	tracker *proposals.Tracker[uint64]
	// catchUps shares read rounds among concurrent CatchUp callers; its
	// goroutine ends by Close.
	catchUps *rounds
}

// maxPending bounds concurrent Put and Delete calls on the leader.
const maxPending = 1024

var _ raftlog.StateMachine = (*Registry)(nil)

// New returns an empty registry; raftlog's AddGroup restores it.
func New(logger zerolog.Logger) *Registry {
	r := &Registry{
		logger:   logger.With().Str("component", "registry").Logger(),
		now:      time.Now,
		ready:    make(chan struct{}),
		services: make(map[string]*rpc.Service),
		rules:    make(map[string]*rpc.Rule),
		tracker:  proposals.NewTracker[uint64](maxPending),
	}
	// Rounds run only after Start (CatchUp waits for ready), so r.log is
	// set by then.
	r.catchUps = newRounds(func(ctx context.Context) error { return r.log.CatchUp(ctx) })
	return r
}

// Close fails pending Put and Delete calls with rpc.ErrLostLeadership,
// ends a running catch-up round (CatchUp then fails with ErrUnavailable)
// and waits for its goroutine. The registry answers no more calls that
// need the metadata group; Lookup and List still read the last copy.
func (r *Registry) Close() {
	r.tracker.Close()
	r.catchUps.close()
}

// MetaLog is what the registry needs of the metadata group; *raftlog.Group
// satisfies it.
type MetaLog interface {
	// Propose appends data if this node leads; fails at once with
	// *raftlog.NotLeaderError, raftlog.ErrProposalDropped or
	// raftlog.ErrStopped.
	Propose(ctx context.Context, data []byte) (raftlog.Proposal, error)
	// Status returns the group's state on this node.
	Status() raftlog.Status
	// CatchUp returns once this replica applied everything the leader had
	// committed when it was called (on followers too).
	CatchUp(ctx context.Context) error
}

// Start lets the registry propose through log (the metadata group).
func (r *Registry) Start(log MetaLog) {
	r.log = log
	if _, _, term := r.tracker.Leadership(); term == 0 {
		// No leadership event yet: start from what the group knows.
		st := log.Status()
		r.tracker.SetLeadership(st.Leader, st.Term, st.IsLeader)
	}
	close(r.ready)
}

// OnLeadership records a leadership change of the metadata group; any loss
// of leadership fails pending Put/Delete calls with rpc.ErrLostLeadership.
// Never blocks.
func (r *Registry) OnLeadership(ev raftlog.LeaderEvent) {
	if ev.Group != raftlog.MetaGroup {
		return
	}
	r.tracker.SetLeadership(ev.Leader, ev.Term, ev.IsSelf)
}

// Put registers or replaces a service and returns once the change applied,
// with the metadata log index it applied at (the registration's
// RegisteredIndex). Leader only (*rpc.NotLeaderError otherwise). A
// registration without UpdatedAtUnixMs is stamped here; one stamped by the
// node that took the request keeps its stamp, so that node can answer with
// what is stored.
func (r *Registry) Put(ctx context.Context, svc *rpc.Service) (uint64, error) {
	if err := validateService(svc); err != nil {
		return 0, err
	}
	svc = proto.Clone(svc).(*rpc.Service)
	if svc.UpdatedAtUnixMs == 0 {
		svc.UpdatedAtUnixMs = r.now().UnixMilli()
	}
	requestID := invocation.NewRequestID()
	return r.propose(ctx, requestID, &rpc.Command{Cmd: &rpc.Command_PutService{PutService: &rpc.PutService{Service: svc, RequestId: requestID}}})
}

// Delete removes a service and returns the metadata log index it applied
// at; rpc.ErrNotFound if it is not registered, with the index at which
// that was found (a fence there still passes every older registration).
func (r *Registry) Delete(ctx context.Context, name string) (uint64, error) {
	if name == "" {
		return 0, fmt.Errorf("registry: empty service name: %w", rpc.ErrInvalid)
	}
	requestID := invocation.NewRequestID()
	return r.propose(ctx, requestID, &rpc.Command{Cmd: &rpc.Command_DeleteService{DeleteService: &rpc.DeleteService{Name: name, RequestId: requestID}}})
}

// Lookup returns the applied registration of name.
func (r *Registry) Lookup(name string) (*rpc.Service, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	svc, ok := r.services[name]
	return svc, ok
}

// ErrUnavailable: a service is not in this node's copy of the
// registry, and the copy could not be brought up to date with the metadata
// group's leader, so whether the service exists is unknown for now.
var ErrUnavailable = errors.New("the service registry cannot be checked right now")

// CatchUp returns once this replica applied everything the metadata
// group's leader had committed when it was called (MetaLog.CatchUp), so
// that reads after it see every Put and Delete answered before it, through
// any node. When no leader answers within ctx it fails with an error
// wrapping ErrUnavailable: the caller should answer "retry later",
// never "not registered" or an empty list.
func (r *Registry) CatchUp(ctx context.Context) error {
	select {
	case <-r.ready:
	default:
		return fmt.Errorf("%w: this node's registry is still loading", ErrUnavailable)
	}
	// A read index can be lost on the way (a peer stream that broke drops
	// what it held): each round gets catchUpRound, and a failed one is
	// tried again, after a pause, until ctx ends. Concurrent callers share
	// rounds (rounds.go).
	for {
		err := r.catchUps.wait(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, errClosed) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		pause := time.NewTimer(catchUpPause)
		select {
		case <-ctx.Done():
			pause.Stop()
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		case <-pause.C:
		}
	}
}

// A catch-up round's bound, and the pause before the next one: a lost read
// index costs a round, not the caller's whole wait, and a metadata group
// without a leader (which fails a round at once) is asked again shortly.
const (
	catchUpRound = 250 * time.Millisecond
	catchUpPause = 20 * time.Millisecond
)

// LookupCurrent is Lookup after a CatchUp bounded by ctx: the answer
// reflects every Put and Delete answered before the call, whichever node
// took them. It is rpc.ErrNotFound when the service is not registered and
// ErrUnavailable when the catch-up failed, hit or miss: a hit on a
// replica that may lag could be a service already removed.
func (r *Registry) LookupCurrent(ctx context.Context, name string) (*rpc.Service, error) {
	if err := r.CatchUp(ctx); err != nil {
		return nil, err
	}
	if svc, ok := r.Lookup(name); ok {
		return svc, nil
	}
	return nil, fmt.Errorf("service %q: %w", name, rpc.ErrNotFound)
}

// List returns every registered service, sorted by name.
func (r *Registry) List() []*rpc.Service {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*rpc.Service, 0, len(r.services))
	for _, s := range r.services {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (r *Registry) propose(ctx context.Context, requestID []byte, cmd *rpc.Command) (uint64, error) {
	select {
	case <-r.ready:
	default:
		return 0, &rpc.NotLeaderError{}
	}
	data, err := rpc.EncodeBatch(cmd)
	if err != nil {
		return 0, err
	}
	return proposals.ProposeAndWait(ctx, r.tracker, r.log, requestID, data, r.proposeError)
}

// proposeError maps a refused Propose to the errors callers branch on.
func (r *Registry) proposeError(err error) error {
	var nl *raftlog.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return &rpc.NotLeaderError{Leader: nl.Leader, Term: nl.Term}
	case errors.Is(err, raftlog.ErrProposalDropped), errors.Is(err, raftlog.ErrStopped):
		st := r.log.Status()
		return &rpc.NotLeaderError{Leader: st.Leader, Term: st.Term}
	}
	return fmt.Errorf("registry: propose: %w", err)
}

// Apply implements raftlog.StateMachine.
func (r *Registry) Apply(b *bolt.Bucket, entries []raftlog.Entry) (raftlog.Applied, error) {
	sb, err := b.CreateBucketIfNotExists(servicesBucket)
	if err != nil {
		return raftlog.Applied{}, fmt.Errorf("registry: create bucket: %w", err)
	}
	rb, err := b.CreateBucketIfNotExists(rulesBucket)
	if err != nil {
		return raftlog.Applied{}, fmt.Errorf("registry: create bucket: %w", err)
	}
	type change struct {
		name string
		svc  *rpc.Service // nil: deleted
	}
	type ruleChange struct {
		pattern string
		rule    *rpc.Rule // nil: deleted
	}
	var ruleChanges []ruleChange
	type outcome struct {
		requestID []byte
		term      uint64
		index     uint64
		err       error
	}
	var changes []change
	var outcomes []outcome
	for _, e := range entries {
		batch, err := rpc.DecodeBatch(e.Data)
		if err != nil {
			return raftlog.Applied{}, fmt.Errorf("registry: entry %d: %w", e.Index, err)
		}
		for _, c := range batch.Commands {
			o := outcome{term: e.Term, index: e.Index}
			switch cmd := c.Cmd.(type) {
			case *rpc.Command_PutService:
				o.requestID = cmd.PutService.RequestId
				svc := cmd.PutService.Service
				if validateService(svc) != nil {
					o.err = fmt.Errorf("registry: malformed service: %w", rpc.ErrInvalid)
					break
				}
				svc.RegisteredIndex = e.Index
				data, err := storeMarshal.Marshal(svc)
				if err != nil {
					return raftlog.Applied{}, fmt.Errorf("registry: marshal: %w", err)
				}
				if err := sb.Put([]byte(svc.Name), data); err != nil {
					return raftlog.Applied{}, fmt.Errorf("registry: put: %w", err)
				}
				changes = append(changes, change{svc.Name, svc})
			case *rpc.Command_DeleteService:
				o.requestID = cmd.DeleteService.RequestId
				name := []byte(cmd.DeleteService.Name)
				if sb.Get(name) == nil {
					o.err = fmt.Errorf("registry: service %q: %w", cmd.DeleteService.Name, rpc.ErrNotFound)
					break
				}
				if err := sb.Delete(name); err != nil {
					return raftlog.Applied{}, fmt.Errorf("registry: delete: %w", err)
				}
				changes = append(changes, change{name: cmd.DeleteService.Name})
			case *rpc.Command_PutRule, *rpc.Command_DeleteRule:
				if p, ok := c.Cmd.(*rpc.Command_PutRule); ok {
					o.requestID = p.PutRule.RequestId
				} else {
					o.requestID = c.GetDeleteRule().RequestId
				}
				pattern, rule, changed, refused, err := applyRule(rb, c, e.Index)
				if err != nil {
					return raftlog.Applied{}, err
				}
				o.err = refused
				if changed {
					ruleChanges = append(ruleChanges, ruleChange{pattern, rule})
				}
			default:
				return raftlog.Applied{}, fmt.Errorf("registry: entry %d: unexpected command %T", e.Index, c.Cmd)
			}
			outcomes = append(outcomes, o)
		}
	}
	// Reveal only: lookups read the registry's own state, so nothing is
	// answered before the commit makes it visible.
	return raftlog.Applied{Reveal: func() {
		if len(changes) > 0 {
			r.mu.Lock()
			next := make(map[string]*rpc.Service, len(r.services)+1)
			for k, v := range r.services {
				next[k] = v
			}
			for _, c := range changes {
				if c.svc == nil {
					delete(next, c.name)
				} else {
					next[c.name] = c.svc
				}
			}
			r.services = next
			r.mu.Unlock()
		}
		if len(ruleChanges) > 0 {
			r.mu.Lock()
			next := maps.Clone(r.rules)
			for _, c := range ruleChanges {
				if c.rule == nil {
					delete(next, c.pattern)
				} else {
					next[c.pattern] = c.rule
				}
			}
			r.rules = next
			r.mu.Unlock()
		}
		for _, o := range outcomes {
			r.tracker.Resolve(o.requestID, o.term, proposals.Reply[uint64]{Value: o.index, Err: o.err})
		}
	}}, nil
}

// Restore implements raftlog.StateMachine: it reloads the in-memory
// registry from b.
func (r *Registry) Restore(b *bolt.Bucket) error {
	next := make(map[string]*rpc.Service)
	if sb := b.Bucket(servicesBucket); sb != nil {
		err := sb.ForEach(func(k, v []byte) error {
			svc := &rpc.Service{}
			if err := proto.Unmarshal(v, svc); err != nil {
				return fmt.Errorf("registry: service %q: %w", k, err)
			}
			next[svc.Name] = svc
			return nil
		})
		if err != nil {
			return err
		}
	}
	rules, err := restoreRules(b)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.services = next
	r.rules = rules
	r.mu.Unlock()
	return nil
}

func validateService(svc *rpc.Service) error {
	if svc == nil || svc.Name == "" {
		return fmt.Errorf("registry: service name required: %w", rpc.ErrInvalid)
	}
	u, err := url.Parse(svc.Url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("registry: service %q: url %q must be http(s)://host[:port][/path]: %w", svc.Name, svc.Url, rpc.ErrInvalid)
	}
	if slices.Contains(svc.Handlers, "") {
		return fmt.Errorf("registry: service %q: empty handler name: %w", svc.Name, rpc.ErrInvalid)
	}
	return CheckKind(svc)
}

// CheckKind checks the kind and the shared handlers: only keyed
// services have shared handlers, each one of the listed handlers (when
// handlers are listed), and a workflow's run is never shared.
func CheckKind(svc *rpc.Service) error {
	switch svc.Kind {
	case rpc.Service_SERVICE:
		if len(svc.Shared) > 0 {
			return fmt.Errorf("registry: service %q: a plain service has no shared handlers (kind object or workflow): %w", svc.Name, rpc.ErrInvalid)
		}
	case rpc.Service_OBJECT, rpc.Service_WORKFLOW:
	default:
		return fmt.Errorf("registry: service %q: unknown kind %d: %w", svc.Name, svc.Kind, rpc.ErrInvalid)
	}
	for _, h := range svc.Shared {
		if h == "" || (len(svc.Handlers) > 0 && !slices.Contains(svc.Handlers, h)) {
			return fmt.Errorf("registry: service %q: shared handler %q is not one of its handlers: %w", svc.Name, h, rpc.ErrInvalid)
		}
		if svc.Kind == rpc.Service_WORKFLOW && h == WorkflowRun {
			return fmt.Errorf("registry: workflow %q: run cannot be shared: %w", svc.Name, rpc.ErrInvalid)
		}
	}
	if svc.Kind == rpc.Service_WORKFLOW && len(svc.Handlers) > 0 && !slices.Contains(svc.Handlers, WorkflowRun) {
		return fmt.Errorf("registry: workflow %q: its handlers must include run: %w", svc.Name, rpc.ErrInvalid)
	}
	return nil
}

// WorkflowRun is a workflow's exclusive handler, run once per workflow id.
const WorkflowRun = "run"

// Exclusive reports whether handler of svc runs only while holding its
// key: the non-shared handlers of an object, and a workflow's run. Plain
// services have no key.
func Exclusive(svc *rpc.Service, handler string) bool {
	switch svc.GetKind() {
	case rpc.Service_OBJECT:
		return !slices.Contains(svc.Shared, handler)
	case rpc.Service_WORKFLOW:
		return handler == WorkflowRun
	}
	return false
}
