package partition

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/time/rate"
)

// Flow control: the limits of a service's registration (rpc.Limits of the
// service and of its handlers, perKeyConcurrency) and the scope rules,
// enforced by each partition's invoker.
//
//   - A cluster-wide concurrency limit N is split among the P partitions
//     by shares that follow the demand and add up to at most N, 0
//     included (shares.go): a partition enforces the share it adopted
//     through its log, the static split (cluster.StaticShare) before any.
//   - What is in flight is counted from state: before calling a limited
//     service the leader proposes Start, which marks the outbox entry under
//     way until the attempt's deadline, and calls only once it applied,
//     with that deadline. A new leader counts every marked entry in flight
//     until its outcome applies or its deadline passes, and delivers it
//     again only then, so the old leader's calls are over (they end at
//     the deadline, or when the old leader dies and its connections
//     close; a service that keeps running a call whose caller is gone
//     can see more, and so can leaders whose clocks disagree by more than
//     the deadline's margin).
//   - perKeyConcurrency is not split: a key's invocations all live in
//     one partition.
//   - ratePerSecond and burst are token buckets on the leader, one per
//     service and per handler. The rate is split among partitions as a
//     concurrency limit is (shares.go), in thousandths of a token per
//     second (cluster.RateFigure), under its own key (rateKey): a
//     partition whose deliveries wait on the bucket reports them, and
//     the metadata leader moves the rate of idle partitions to it, so a
//     backlog in one partition runs at the whole rate. The burst is split
//     statically (share, at least 1). A bucket starts empty at each term,
//     so a leader change never adds a burst.
//   - Fairness: due deliveries held by a limit wait in a fairQueue grouped
//     by (service, key), the key being the object key, else the
//     idempotency key (those with neither share one group per priority),
//     and are admitted round robin across groups, in order within a group.
//   - Priority (Invoke.priority, x-raftgate-priority): a group's priority
//     is its next delivery's; the groups of the highest priority are
//     admitted first, round robin among equals. Order within a group
//     holds, so a high-priority delivery behind a low-priority one of its
//     key waits for it. Deliveries of services without limits are not
//     held, so priority does not reorder them.
//   - The scan window. A scan reads the records of at most
//     Invoker.ScanLimit due entries, and walks the keys of at most
//     scanWalkFactor times as many. A fairness group takes at most
//     groupCap candidates per scan (no more than it could have admitted
//     in that scan); its later deliveries are passed over (skipped): they
//     cannot go before its candidates, as order within a group holds.
//     The leader remembers the group of every held delivery it read
//     (invoker.known, with the registration it read it under), so a later
//     walk passes over those deliveries from their keys alone, without
//     their records; and the longest stretch of reserved and held
//     deliveries a scan walked becomes a skip run (skiprun.go) that the
//     next scans jump, taking each group's candidates from the few it
//     remembers, then walk on from its end, extending it. So a hot key's
//     backlog costs a scan its candidates' reads, and the window reaches
//     the deliveries behind it. Passing over never admits anything: the
//     candidates are read afresh, limits are counted as before (from
//     the reservations and the marks in state); this is leader-local
//     soft state, dropped at each term, on a rollback or Restore, per
//     delivery when an outcome applies (and the run by whatever could
//     put into it what a walk would not pass over); nothing stored
//     changes. Known limits: a scan that starts without a run (the first
//     of a term, after a drop, and at each IdleRecheck, which reads the
//     outbox from its first entry) sees no further than its walk, and
//     each scan after it reaches at most scanWalkFactor * ScanLimit keys
//     of known held deliveries (ScanLimit unknown ones, as they are read)
//     further; and deliveries behind more than about ScanLimit / groupCap
//     held groups wait for those to shrink, as every group's candidates
//     are read at every scan.
//   - heldBy: the scan notes, for each delivery it left waiting, the limit
//     it found full (holderOf), as the leader's soft state for listings;
//     the next scan replaces it. A skipped delivery is held as the
//     last candidate of its group.

// FlowRules is what the invoker needs to enforce flow control, an optional
// interface of Config.Services (registry.InvokerLookup implements it);
// without it no limit is enforced. Methods are called from the invoker's
// scan and must not block.
type FlowRules interface {
	// Registered returns the service's registration as this replica holds
	// it.
	Registered(name string) (*rpc.Service, bool)
	// RuleFor returns the enabled scope rule that applies to scope.
	RuleFor(scope string) (*rpc.Rule, bool)
	// HasRules reports whether any scope rule exists.
	HasRules() bool
}

// startMark is a Start command's outcome, for the leader that waits on it.
type startMark struct {
	id     []byte
	until  int64
	marked bool
}

// start marks a pending invocation's outbox entry under way (Start); a
// Start for another attempt, or for an invocation not in the outbox, marks
// nothing.
func (m *machine) start(b *bolt.Bucket, c *rpc.Start, fx *effects) error {
	rec, found, err := m.record(b, c.InvocationId)
	if err != nil {
		return err
	}
	marked := false
	if found && rec.State == rpc.InvocationRecord_PENDING && c.Attempt == rec.Attempts+1 {
		if marked, err = outbox.MarkStarted(b, dueOf(rec), c.InvocationId, c.UntilUnixMs); err != nil {
			return err
		}
	}
	fx.started = append(fx.started, startMark{id: c.InvocationId, until: c.UntilUnixMs, marked: marked})
	return nil
}

// share is partition p's (1..parts) part of a token bucket's burst n:
// n/P, plus one for the first n mod P partitions, and at least 1.
func share(n uint32, parts, p uint32) int {
	if parts == 0 {
		parts = 1
	}
	s := n / parts
	if (p-1)%parts < n%parts {
		s++
	}
	return max(int(s), 1)
}

// demand is one concurrency limit a delivery is held by.
type demand struct {
	counter string // what it counts against
	limit   int    // this partition's share
	name    string // the limit as heldBy names it
}

// The limits as heldBy names them (docs/api.md); a scope rule's name is
// "scope rule " and its pattern.
const (
	heldByService     = "service concurrency"
	heldByHandler     = "handler concurrency"
	heldByPerKey      = "perKeyConcurrency"
	heldByServiceRate = "service rate"
	heldByHandlerRate = "handler rate"
	// heldByNode: the node's own caps (--concurrency per partition and
	// per service) are full.
	heldByNode = "node concurrency"
	// heldByKeyOrder: no limit is full for it, but an earlier delivery of
	// its (service, key) group waits.
	heldByKeyOrder = "key order"
)

// flowOf returns the concurrency limits that hold rec (nil: none) and the
// token buckets it takes from.
func (iv *invoker) flowOf(svc *rpc.Service, rule *rpc.Rule, rec *rpc.InvocationRecord) (ds []demand, buckets []bucketSpec) {
	inv := rec.Invoke
	parts, p := iv.p.cfg.Partitions, iv.p.cfg.Partition
	add := func(counter string, l *rpc.Limits, name, rateName string) {
		if l.GetConcurrency() > 0 {
			ds = append(ds, demand{counter: counter, limit: iv.shareOf(counter, l.GetConcurrency()), name: name})
		}
		if r := l.GetRatePerSecond(); r > 0 {
			key := rateKey(counter)
			rps := float64(iv.shareOf(key, cluster.RateFigure(r))) / 1000
			buckets = append(buckets, bucketSpec{name: counter, share: key, rate: rps, burst: share(l.GetBurst(), parts, p), heldBy: rateName})
		}
	}
	add("s\x00"+inv.Service, svc.GetLimits(), heldByService, heldByServiceRate)
	for _, hc := range svc.GetHandlerConfig() {
		if hc.GetHandler() == inv.Handler {
			add("h\x00"+inv.Service+"\x00"+inv.Handler, hc.GetLimits(), heldByHandler, heldByHandlerRate)
		}
	}
	if rule != nil && rule.Concurrency > 0 {
		ds = append(ds, demand{counter: "r\x00" + inv.Scope, limit: iv.shareOf("r\x00"+inv.Scope, rule.Concurrency), name: "scope rule " + rule.Pattern})
	}
	if n := svc.GetPerKeyConcurrency(); n > 0 && inv.Key != "" && !inv.Exclusive {
		ds = append(ds, demand{counter: "k\x00" + inv.Service + "\x00" + inv.Key, limit: int(n), name: heldByPerKey})
	}
	return ds, buckets
}

// rateKey is the split limit key of a counter's rate: its kind in upper
// case ("S" for a service's rate, "H" for a handler's).
func rateKey(counter string) string { return strings.ToUpper(counter[:1]) + counter[1:] }

// bucketSpec is a token bucket a delivery takes a token from.
type bucketSpec struct {
	name string
	// share is the split limit key of its rate (rateKey).
	share  string
	rate   float64
	burst  int
	heldBy string
}

// bucket returns the leader's token bucket of spec, created empty.
func (iv *invoker) bucket(spec bucketSpec, now time.Time) *rate.Limiter {
	l, ok := iv.buckets[spec.name]
	if !ok {
		l = rate.NewLimiter(rate.Limit(spec.rate), spec.burst)
		l.AllowN(now, spec.burst) // starts empty
		iv.buckets[spec.name] = l
		return l
	}
	if l.Limit() != rate.Limit(spec.rate) {
		l.SetLimitAt(now, rate.Limit(spec.rate))
	}
	if l.Burst() != spec.burst {
		l.SetBurstAt(now, spec.burst)
	}
	return l
}

// zeroRateRecheck is how soon a scan looks again at deliveries held by a
// rate whose share here is 0 (the metadata leader moves shares about every
// second).
const zeroRateRecheck = time.Second

// takeTokens takes one token from every bucket of specs, or none; when
// some bucket is empty it returns when the next token is due.
func (iv *invoker) takeTokens(specs []bucketSpec, now time.Time) (bool, time.Time) {
	var wait time.Duration
	for _, s := range specs {
		switch t := iv.bucket(s, now).TokensAt(now); {
		case s.rate <= 0:
			// This partition's share of the rate is 0 for now: look again
			// when the split may have moved.
			wait = max(wait, zeroRateRecheck)
		case t < 1:
			wait = max(wait, time.Duration((1-t)/s.rate*float64(time.Second))+time.Millisecond)
		}
	}
	if wait > 0 {
		return false, now.Add(wait)
	}
	for _, s := range specs {
		iv.buckets[s.name].AllowN(now, 1)
	}
	return true, time.Time{}
}

// limited is a due delivery held by some limit, waiting for its turn.
type limited struct {
	rec     *rpc.InvocationRecord
	demands []demand
	buckets []bucketSpec
}

// fairGroup is the fairness group of a delivery: its service and key.
// Deliveries with no key have no order to keep: they group by priority,
// so that a high-priority one does not wait behind low-priority ones.
func fairGroup(inv *rpc.Invoke) string {
	k := inv.Key
	if k == "" {
		k = inv.IdempotencyKey
	}
	if k == "" && inv.Priority != 0 {
		return inv.Service + "\x00\x00" + strconv.Itoa(int(inv.Priority))
	}
	return inv.Service + "\x00" + k
}

// scanWalkFactor: a scan walks at most this many times ScanLimit outbox
// keys, passing over those it needs no record of (reserved, marked,
// skipped); the leader knows the group of as many held deliveries. A key
// passed over costs a cursor step and a map lookup, some 20 times less
// than a record read, so a full walk costs at most about what reading
// ScanLimit records does.
const scanWalkFactor = 8

// knownHeld is what the leader remembers of a delivery a scan read and
// found held by a limit: its fairness group (fixed by its Invoke) and the
// registration it was read under (another one: read it again).
type knownHeld struct {
	group string
	svc   *rpc.Service
}

type knownEntry struct {
	id string
	knownHeld
}

// groupCap is how many candidates one scan queues of a fairness group of
// svc: at most the scan's free slots, the limits every delivery of the
// group counts against (the service's concurrency share, its bucket's
// burst share; a keyed service's perKeyConcurrency, plus the one
// exclusive invocation a key may have queued: no scan admits more of
// it), and half of ScanLimit, so that one group leaves reads to the
// others; at least 1.
func (iv *invoker) groupCap(svc *rpc.Service, free int) int {
	n := min(free, max(iv.cfg.ScanLimit/2, 1))
	if k := svc.GetPerKeyConcurrency(); k > 0 && svc.GetKind() != rpc.Service_SERVICE {
		n = min(n, int(k)+1) // its groups are keys (fairGroup)
	}
	l := svc.GetLimits()
	if c := l.GetConcurrency(); c > 0 {
		n = min(n, iv.shareOf("s\x00"+svc.GetName(), c))
	}
	if l.GetRatePerSecond() > 0 {
		n = min(n, share(l.GetBurst(), iv.p.cfg.Partitions, iv.p.cfg.Partition))
	}
	return max(n, 1)
}

// holderOf names the limit that holds l after the scan's admissions:
// the first full concurrency limit, else the node's caps, else an empty
// token bucket, else the order of its group.
func (iv *invoker) holderOf(l limited, counts, busy map[string]int, nodeFull bool, now time.Time) string {
	for _, d := range l.demands {
		if counts[d.counter] >= d.limit {
			return d.name
		}
	}
	if nodeFull || busy[l.rec.Invoke.Service] >= iv.cfg.ServiceConcurrency {
		return heldByNode
	}
	for _, b := range l.buckets {
		if iv.bucket(b, now).TokensAt(now) < 1 {
			return b.heldBy
		}
	}
	return heldByKeyOrder
}

// fairQueue admits waiting items across groups, in order within a group:
// the groups whose head has the highest priority first, round robin among
// equals starting after the group served last (last persists across scans
// in the invoker). Each group is listed in the level of its head's
// priority, so an admission costs a pass over one level's groups, as
// without priorities. Deterministic: a level's groups go in sorted order.
type fairQueue[T any] struct {
	items   map[string][]prioritized[T]
	blocked map[string]bool
	levels  map[int32][]string // sorted: the groups listed at a priority
	listed  map[string]int32   // the level each group is listed at
	prios   []int32            // the levels, highest first
	n       int
}

type prioritized[T any] struct {
	prio int32
	item T
}

func newFairQueue[T any]() *fairQueue[T] {
	return &fairQueue[T]{items: make(map[string][]prioritized[T]), blocked: make(map[string]bool),
		levels: make(map[int32][]string), listed: make(map[string]int32)}
}

func (q *fairQueue[T]) push(group string, prio int32, item T) {
	if len(q.items[group]) == 0 {
		q.list(group, prio) // a new head
	}
	q.items[group] = append(q.items[group], prioritized[T]{prio, item})
	q.n++
}

// list moves group to level prio.
func (q *fairQueue[T]) list(group string, prio int32) {
	if at, ok := q.listed[group]; ok {
		if at == prio {
			return
		}
		lv := q.levels[at]
		i, _ := slices.BinarySearch(lv, group)
		q.levels[at] = slices.Delete(lv, i, i+1)
	}
	lv, ok := q.levels[prio]
	if !ok {
		i, _ := slices.BinarySearchFunc(q.prios, prio, func(a, b int32) int { return cmp.Compare(b, a) })
		q.prios = slices.Insert(q.prios, i, prio)
	}
	i, _ := slices.BinarySearch(lv, group)
	q.levels[prio] = slices.Insert(lv, i, group)
	q.listed[group] = prio
}

// len returns the items waiting.
func (q *fairQueue[T]) len() int { return q.n }

// each calls fn with every item waiting, in no particular order.
func (q *fairQueue[T]) each(fn func(T)) {
	for _, items := range q.items {
		for _, it := range items {
			fn(it.item)
		}
	}
}

// next returns the head of the first group after *last (wrapping), of the
// highest priority among the heads, that admit accepts, and makes it
// *last. A group whose head admit refuses is passed over until the queue
// is built again, so its order holds.
func (q *fairQueue[T]) next(last *string, admit func(T) bool) (T, bool) {
	for _, p := range q.prios {
		lv := q.levels[p]
		start, found := slices.BinarySearch(lv, *last)
		if found {
			start++
		}
		for i := range len(lv) {
			g := lv[(start+i)%len(lv)]
			items := q.items[g]
			if len(items) == 0 || q.blocked[g] {
				continue
			}
			if !admit(items[0].item) {
				q.blocked[g] = true
				continue
			}
			*last = g
			q.items[g] = items[1:]
			q.n--
			if len(items) > 1 {
				q.list(g, items[1].prio) // its next head's level
			}
			return items[0].item, true
		}
	}
	var zero T
	return zero, false
}

// proposeStart marks rec's delivery under way until until and waits for
// the mark to apply; false when it did not (the delivery is released).
func (iv *invoker) proposeStart(ctx context.Context, id []byte, attempt uint32, until int64) bool {
	ch := make(chan bool, 1)
	iv.mu.Lock()
	iv.starting[string(id)] = startWait{until: until, ch: ch}
	iv.mu.Unlock()
	defer func() {
		iv.mu.Lock()
		if w, ok := iv.starting[string(id)]; ok && w.ch == ch {
			delete(iv.starting, string(id))
		}
		iv.mu.Unlock()
	}()
	proposed := make(chan error, 1)
	iv.p.submit(ctx, &rpc.Command{Cmd: &rpc.Command_Start{Start: &rpc.Start{
		InvocationId: id, Attempt: attempt, UntilUnixMs: until, ProposedAtUnixMs: iv.p.now().UnixMilli(),
	}}}, func(err error) { proposed <- err })
	select {
	case err := <-proposed:
		if err != nil {
			return false
		}
	case <-ctx.Done():
		return false
	}
	select {
	case ok := <-ch:
		return ok
	case <-ctx.Done():
		return false
	}
}

// startWait is a delivery waiting for its Start to apply.
type startWait struct {
	until int64
	ch    chan bool // cap 1
}

// startsApplied tells the deliveries waiting on marks whether they apply.
// Called from Reveal; never blocks.
func (iv *invoker) startsApplied(marks []startMark) {
	if len(marks) == 0 {
		return
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	for _, m := range marks {
		if _, ok := iv.inflight[string(m.id)]; !ok && m.marked {
			iv.dropRun() // another leader's mark, maybe in the run
		}
		if w, ok := iv.starting[string(m.id)]; ok && w.until == m.until {
			delete(iv.starting, string(m.id))
			w.ch <- m.marked
		}
	}
}

// heldMark is an entry marked under way that this leader did not reserve.
type heldMark struct {
	until    int64
	counters []string
}

type heldEntry struct {
	id string
	heldMark
}

func (iv *invoker) isHeld(id []byte) bool {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	_, ok := iv.held[string(id)]
	return ok
}

// heldFromState reads the counters a marked entry occupies.
func (iv *invoker) heldFromState(b *bolt.Bucket, q outbox.Queued, rules FlowRules, hasRules bool) (heldEntry, error) {
	h := heldEntry{id: string(q.ID), heldMark: heldMark{until: q.StartedUntil}}
	rec, found, err := getRecord(b, q.ID)
	if err != nil || !found {
		return h, err
	}
	svc, _ := rules.Registered(rec.Invoke.Service)
	var rule *rpc.Rule
	if hasRules {
		rule, _ = rules.RuleFor(rec.Invoke.GetScope())
	}
	ds, _ := iv.flowOf(svc, rule, rec)
	h.counters = counters(ds)
	return h, nil
}

func counters(ds []demand) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.counter
	}
	return out
}

// underFlowControl reports whether a service's registration has limits.
func underFlowControl(svc *rpc.Service) bool {
	if svc.GetLimits() != nil || svc.GetPerKeyConcurrency() > 0 {
		return true
	}
	return slices.ContainsFunc(svc.GetHandlerConfig(), func(hc *rpc.HandlerConfig) bool { return hc.GetLimits() != nil })
}
