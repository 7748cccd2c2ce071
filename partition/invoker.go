package partition

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/time/rate"
)

// invoker runs the outbox on the leader. It reads the outbox (never pops
// it), reserves due deliveries in memory, calls the services and proposes
// the outcome (Complete or AttemptFailed); the reservation ends when that
// command applies, so an entry is never delivered twice concurrently by one
// leader. A new leader starts with no reservations: whatever the old one was
// doing is delivered again (at-least-once), and the first Complete in the
// log wins (exactly-once result).
type invoker struct {
	p    *Processor
	cfg  InvokerConfig
	wake chan struct{} // cap 1

	rndMu sync.Mutex
	rnd   *rand.Rand // guarded by rndMu; backoff jitter

	targets targetCache // the URLs deliveries go to
	workers *workers    // run deliveries and admits

	// term is the term run delivers for, seq numbers its deliveries:
	// together each delivery's attempt identity (x-raftgate-attempt-id),
	// never the same twice, as a term has one leader.
	term, seq atomic.Uint64

	mu sync.Mutex
	// inflight holds reserved ids (delivering, or outcome proposed but not
	// yet applied); its size is the partition's concurrency. Guarded by mu.
	inflight map[string]struct{}
	// delivering holds ids whose HTTP call is under way. Guarded by mu.
	delivering map[string]struct{}
	// done holds ids whose outcome applied since the current scan began,
	// so a scan that read an older view does not reserve them again; it
	// is filled only while a scan runs (never on a follower). Guarded by
	// mu.
	done map[string]struct{}
	// perService counts HTTP calls under way per service. Guarded by mu.
	perService map[string]int
	// holding lists the flow-control counters (flow.go) of the reserved
	// deliveries that count against a concurrency limit, held lists those
	// of the entries another leader (or a released delivery) marked under
	// way, until their mark's end. starting holds the deliveries waiting
	// for their Start to apply. Guarded by mu.
	holding  map[string][]string
	held     map[string]heldMark
	starting map[string]startWait
	// heldBy names, for each delivery the last scan left waiting for a
	// limit, the limit it found full (flow.go). Guarded by mu.
	heldBy map[string]string
	// known remembers the deliveries scans read and found held by a
	// limit (flow.go, "The scan window"), so that a scan passes over those
	// of a group with enough candidates without reading their records. At
	// most knownLimit entries; an outcome applied drops its id. skippedBy
	// names, for each group the last scan passed deliveries of, the limit
	// holding its last candidate: heldByOf's answer for them. Guarded by
	// mu.
	known     map[string]knownHeld
	skippedBy map[string]string
	// skip is the skip run (skiprun.go; a scan takes it while it runs),
	// runTo the end of the last one kept, runGen counts the drops.
	// Guarded by mu.
	skip   *skipRun
	runTo  []byte
	runGen uint64
	// runTurn rotates the group a jump starts at, so that groups past
	// the reads a scan has left get their turn. Guarded by mu.
	runTurn uint
	// lastWalk and lastReads are the keys the last scan walked and the
	// records it read (tests). Guarded by mu.
	lastWalk, lastReads int
	// buckets are the leader's token buckets and fairLast the fairness
	// group admitted last (flow.go); used by scan alone.
	buckets  map[string]*rate.Limiter
	fairLast string
	// from is the outbox key the next scan starts at (nil: the first), so
	// that a scan does not read again, on every wake-up, the deliveries
	// under way at the head of the queue: every due entry before from was
	// reserved when a scan read it. A delivery queued since (applied) or a
	// released reservation lowers it. Guarded by mu.
	from []byte
	// scanning is set while a scan runs, from before it reads its view
	// until it reserved what it picked: the view may miss what happened
	// meanwhile (done). If from was lowered meanwhile, lowered is set and
	// low is the lowest key it was lowered to (nil: the first). Guarded by
	// mu.
	scanning, lowered bool
	low               []byte
}

func newInvoker(p *Processor) *invoker {
	seed := uint64(time.Now().UnixNano())
	if p.cfg.Knobs != nil && p.cfg.Knobs.JitterSeed != 0 {
		seed = p.cfg.Knobs.JitterSeed
	}
	iv := &invoker{p: p, cfg: p.cfg.Invoker, wake: make(chan struct{}, 1), rnd: rand.New(rand.NewPCG(seed, uint64(p.cfg.Partition))),
		workers: newWorkers(time.Second, p.stop)}
	iv.reset()
	return iv
}

func (iv *invoker) reset() {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.inflight = make(map[string]struct{})
	iv.delivering = make(map[string]struct{})
	iv.done = make(map[string]struct{})
	iv.perService = make(map[string]int)
	iv.holding = make(map[string][]string)
	iv.held = make(map[string]heldMark)
	iv.starting = make(map[string]startWait)
	iv.heldBy = nil
	iv.known = make(map[string]knownHeld)
	iv.skippedBy = nil
	iv.buckets = make(map[string]*rate.Limiter)
	iv.fairLast = ""
	iv.from, iv.scanning, iv.lowered, iv.low = nil, false, false, nil
	iv.skip, iv.runTo = nil, nil
	iv.p.flow.forget()
}

// lowerFrom makes the next scan start at key or before it (nil: at the
// first entry). Call with mu held.
func (iv *invoker) lowerFrom(key []byte) {
	iv.from = lowerKey(iv.from, key)
	if key == nil || iv.runTo != nil && bytes.Compare(key, iv.runTo) < 0 {
		iv.dropRun() // queued into it, or every entry to be read again
	}
	if iv.scanning {
		if !iv.lowered {
			iv.low, iv.lowered = key, true
		} else {
			iv.low = lowerKey(iv.low, key)
		}
	}
}

// lowerKey returns the lower of two scan starts, nil being the first key.
func lowerKey(a, b []byte) []byte {
	if a == nil || b == nil {
		return nil
	}
	if bytes.Compare(b, a) < 0 {
		return b
	}
	return a
}

// rescan makes the next scan read the whole outbox (its state was replaced
// or rolled back) and wakes the invoker.
func (iv *invoker) rescan() {
	iv.mu.Lock()
	iv.lowerFrom(nil)
	clear(iv.known) // entries it knew may be gone without an outcome
	iv.mu.Unlock()
	iv.kick()
}

func (iv *invoker) kick() {
	select {
	case iv.wake <- struct{}{}:
	default:
	}
}

// applied ends the reservations of ids whose outcome applied; added says
// deliveries were queued, the earliest due at firstQueued. Called from
// Reveal; never blocks.
func (iv *invoker) applied(ids [][]byte, added bool, firstQueued int64) {
	if len(ids) > 0 || added {
		iv.mu.Lock()
		for _, id := range ids {
			if _, ok := iv.inflight[string(id)]; !ok {
				iv.dropRun() // not this leader's delivery: it may lie in the run
			}
			delete(iv.inflight, string(id))
			delete(iv.holding, string(id))
			delete(iv.held, string(id))
			delete(iv.known, string(id))
			if iv.scanning {
				iv.done[string(id)] = struct{}{}
			}
		}
		if added {
			iv.lowerFrom(outbox.StartOf(firstQueued))
		}
		iv.mu.Unlock()
		iv.kick()
	}
}

// release ends id's reservation without an outcome: its entry is still
// queued where it was, so the next scan reads the outbox from the first.
func (iv *invoker) release(id []byte) {
	iv.mu.Lock()
	delete(iv.inflight, string(id))
	delete(iv.holding, string(id)) // a mark it left is held from state
	iv.lowerFrom(nil)
	iv.mu.Unlock()
	iv.kick()
}

func (iv *invoker) isDelivering(id []byte) bool {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	_, ok := iv.delivering[string(id)]
	return ok
}

// heldByOf names the limit that held id at the last scan ("": none).
func (iv *invoker) heldByOf(id []byte) string {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if h, ok := iv.heldBy[string(id)]; ok {
		return h
	}
	if k, ok := iv.known[string(id)]; ok {
		return iv.skippedBy[k.group] // passed over behind its group
	}
	return ""
}

// lookup reports whether id is reserved and, if asked, what known holds
// of it.
func (iv *invoker) lookup(id []byte, known bool) (reserved bool, k knownHeld, isKnown bool) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if _, reserved = iv.inflight[string(id)]; reserved || !known {
		return reserved, k, false
	}
	k, isKnown = iv.known[string(id)]
	return reserved, k, isKnown
}

func (iv *invoker) knownLen() int {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	return len(iv.known)
}

func (iv *invoker) reserved(id []byte) bool {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	_, ok := iv.inflight[string(id)]
	return ok
}

// run delivers due outbox entries until ctx ends (leadership lost).
func (iv *invoker) run(ctx context.Context) {
	iv.reset()
	_, _, term := iv.p.tracker.Leadership()
	iv.term.Store(term)
	iv.seq.Store(0)
	var wg sync.WaitGroup
	defer wg.Wait()
	// Catch up with everything earlier leaders committed before reading
	// the outbox, so finished deliveries are not repeated needlessly.
	for {
		err := iv.p.log.ReadIndex(ctx)
		if err == nil {
			break
		}
		iv.p.logger.Debug().Err(err).Msg("invoker: read barrier failed")
		if !iv.sleep(ctx, min(iv.cfg.IdleRecheck, 50*time.Millisecond)) {
			return
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := iv.scan(ctx, &wg)
		wait := iv.cfg.IdleRecheck
		if next > 0 {
			d := time.Duration(next-iv.p.now().UnixMilli()) * time.Millisecond
			wait = max(min(wait, d), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-iv.wake:
		case <-timer.C:
			// A wake-up by time reads the outbox from the first entry:
			// whatever a resumed scan might have passed over waits one
			// IdleRecheck at most.
			iv.mu.Lock()
			iv.lowerFrom(nil)
			iv.mu.Unlock()
		}
	}
}

func (iv *invoker) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// scan reserves and starts due deliveries up to the concurrency limits
// and the flow control of services (flow.go). It returns when to scan
// again (unix ms): the due time of the first entry not yet due, when a
// token or a mark is due; 0 if none.
func (iv *invoker) scan(ctx context.Context, wg *sync.WaitGroup) int64 {
	if ctx.Err() != nil {
		return 0
	}
	clock := iv.p.now()
	now := clock.UnixMilli()
	iv.mu.Lock()
	clear(iv.done)
	free := iv.cfg.Concurrency - len(iv.inflight)
	busy := make(map[string]int, len(iv.perService))
	for s, n := range iv.perService {
		busy[s] = n
	}
	// In flight against each flow-control counter: this leader's
	// reservations and the marks in state (flow.go).
	counts := make(map[string]int)
	for _, cs := range iv.holding {
		for _, c := range cs {
			counts[c]++
		}
	}
	for id, h := range iv.held {
		if h.until <= now {
			delete(iv.held, id) // its call ended by now: deliver it again
			continue
		}
		for _, c := range h.counters {
			counts[c]++
		}
	}
	start := iv.from
	iv.scanning, iv.lowered, iv.low = free > 0, false, nil
	// The scan takes the skip run; it keeps the one it ends with unless
	// something dropped it meanwhile (runGen, lowered).
	if free <= 0 {
		iv.mu.Unlock()
		return 0
	}
	run, runGen, turn := iv.skip, iv.runGen, iv.runTurn
	iv.skip = nil
	iv.runTurn++
	iv.mu.Unlock()
	shares := iv.p.flow.current()
	rules, _ := iv.p.cfg.Services.(FlowRules)
	hasRules := rules != nil && rules.HasRules()
	// The registration of each service seen, nil when it is under no
	// flow control (no limits, no scope rules): its deliveries are
	// picked from their keys.
	services := make(map[string]*rpc.Service)
	controlled := func(name []byte) *rpc.Service {
		if rules == nil {
			return nil
		}
		svc, ok := services[string(name)]
		if !ok {
			svc, _ = rules.Registered(string(name))
			if svc != nil && !hasRules && !underFlowControl(svc) {
				svc = nil
			}
			services[string(name)] = svc
		}
		return svc
	}
	waiting := newFairQueue[limited]()
	var newHeld []heldEntry
	// Pick from the queue's keys alone; read records only for picks and
	// for deliveries of services under flow control.
	var picks []outbox.Entry
	var lpicks []limited
	var next int64
	soonest := func(at int64) {
		if at > 0 && (next == 0 || at < next) {
			next = at
		}
	}
	var recs []*rpc.InvocationRecord
	var heldBy, skippedBy map[string]string
	// The scan window (flow.go): a held group takes at most groupCap
	// candidates; its later deliveries are passed over (skipped), from
	// known without reading their records.
	candidates := make(map[string]int) // group → candidates queued
	lastOf := make(map[string]limited) // group → its last candidate
	skipped := make(map[string]int)    // group → deliveries passed over
	caps := make(map[*rpc.Service]int) // groupCap of a registration
	groupCap := func(svc *rpc.Service) int {
		n, ok := caps[svc]
		if !ok {
			n = iv.groupCap(svc, free)
			caps[svc] = n
		}
		return n
	}
	var newKnown []knownEntry
	names := make(map[string]string)
	knownRoom := iv.cfg.ScanLimit*scanWalkFactor - iv.knownLen()
	resume := start // where the next scan may start
	// walked counts the due entries the scan went through, reads those it
	// read a record of, picked, or passed over for a full service:
	// bounded by ScanLimit*scanWalkFactor and ScanLimit. Reserved,
	// marked and skipped entries count only as walked.
	walked, reads := 0, 0
	var rb runBuilder // the stretch this scan walks, for the next (skiprun.go)
	keep := func(svc *rpc.Service) int { return max(runNextMin, 2*groupCap(svc)) }
	err := iv.p.log.View(ctx, func(b *bolt.Bucket) error {
		// prefix: every entry read so far is reserved or picked, so the
		// next scan may start after the last of them.
		var last outbox.Queued
		prefix := true
		var walkErr error
		// jump passes over run as a walk would (skiprun.go): false when it
		// cannot. stop: the scan ends there (an error, or no reads left:
		// the groups it got to have their candidates, the run is kept).
		jump := func() (ok, stop bool) {
			type taken struct {
				g    string
				ls   []limited
				next []runEntry
				skip int
			}
			var takes []taken
			names := slices.Sorted(maps.Keys(run.groups))
			exhausted := false
		groups:
			for i := range names {
				g := names[(int(turn)+i)%len(names)]
				rg := run.groups[g]
				if controlled([]byte(rg.service)) != rg.svc {
					return false, false // registration changed
				}
				need := groupCap(rg.svc) - candidates[g]
				t := taken{g: g}
				for j, e := range rg.next {
					if iv.reserved(e.id) {
						t.next = append(t.next, e)
						continue
					}
					if need <= 0 {
						t.next = append(t.next, e)
						t.skip++
						continue
					}
					// Gone (its outcome applied) costs a seek, not a read.
					oe, queued, err := outbox.Get(b, e.due, e.id)
					if err != nil {
						walkErr = err
						return false, true
					}
					if !queued {
						continue
					}
					if oe.StartedUntil > now {
						return false, false // marked: a walk counts it
					}
					if reads++; reads > iv.cfg.ScanLimit {
						exhausted = true // this group and the next wait
						break groups
					}
					rec, found, err := getRecord(b, e.id)
					if err != nil {
						walkErr = err
						return false, true
					}
					if !found || rec.State != rpc.InvocationRecord_PENDING || dueOf(rec) != e.due {
						continue // its outcome applied: gone from the run
					}
					var rule *rpc.Rule
					if hasRules {
						rule, _ = rules.RuleFor(rec.Invoke.GetScope())
					}
					ds, bs := iv.flowOf(rg.svc, rule, rec)
					if len(ds)+len(bs) == 0 || fairGroup(rec.Invoke) != g {
						return false, false
					}
					t.ls = append(t.ls, limited{rec: rec, demands: ds, buckets: bs})
					t.next = append(t.next, e)
					if need--; need == 0 {
						// The rest of next is skipped (or reserved).
						for _, e := range rg.next[j+1:] {
							t.next = append(t.next, e)
							t.skip++
						}
						break
					}
				}
				if need > 0 && rg.rest > 0 {
					return false, false // its next candidates are past next
				}
				t.skip += rg.rest
				takes = append(takes, t)
			}
			for _, t := range takes {
				for _, l := range t.ls {
					candidates[t.g]++
					lastOf[t.g] = l
					waiting.push(t.g, l.rec.Invoke.Priority, l)
				}
				if t.skip > 0 {
					skipped[t.g] += t.skip
				}
				run.groups[t.g].next = t.next
			}
			run.n = 0
			for _, rg := range run.groups {
				run.n += len(rg.next) + rg.rest
			}
			return true, exhausted
		}
		var key []byte    // the entry's queue key, when a run lies ahead
		var jumpTo []byte // where the walk goes on after a jump
		visit := func(q outbox.Queued) bool {
			if q.Due > now {
				soonest(q.Due)
				return false
			}
			if walked++; walked > iv.cfg.ScanLimit*scanWalkFactor {
				return false
			}
			svc := controlled(q.Service)
			reserved, k, isKnown := iv.lookup(q.ID, svc != nil)
			if reserved && prefix {
				last = q // the next scan starts after it, even in a run
				rb.reserved(q)
				return true
			}
			if run != nil {
				key = q.AppendKey(key[:0])
				if bytes.Compare(key, run.from) >= 0 {
					if bytes.Compare(key, run.to) < 0 {
						ok, stop := jump()
						if ok {
							prefix = false
							rb.end()
							rb.resume(run) // kept, and extended by what follows
							if !stop {
								jumpTo = run.to
							}
							run = nil
							return false
						}
						if stop {
							return false
						}
					}
					run = nil // behind the walk, or not to be jumped
				}
			}
			if reserved {
				rb.reserved(q)
				return true
			}
			if q.StartedUntil > now {
				// Marked under way by an earlier leader or a released
				// delivery: in flight until its mark ends.
				rb.end()
				prefix = false
				soonest(q.StartedUntil)
				if !iv.isHeld(q.ID) && rules != nil {
					if reads++; reads > iv.cfg.ScanLimit {
						return false
					}
					h, err := iv.heldFromState(b, q, rules, hasRules)
					if err != nil {
						walkErr = err
						return false
					}
					newHeld = append(newHeld, h)
					for _, c := range h.counters {
						counts[c]++
					}
				}
				return true
			}
			if svc != nil {
				if isKnown && k.svc == svc && candidates[k.group] >= groupCap(svc) {
					prefix = false
					skipped[k.group]++
					rb.held(q, k.group, svc, keep(svc))
					return true
				}
				if reads++; reads > iv.cfg.ScanLimit {
					return false
				}
				rec, found, err := getRecord(b, q.ID)
				if err != nil {
					walkErr = err
					return false
				}
				var rule *rpc.Rule
				if hasRules && found {
					rule, _ = rules.RuleFor(rec.Invoke.GetScope())
				}
				if found && rec.State == rpc.InvocationRecord_PENDING {
					if ds, bs := iv.flowOf(svc, rule, rec); len(ds)+len(bs) > 0 {
						prefix = false
						g := fairGroup(rec.Invoke)
						if n, ok := names[g]; ok {
							g = n // one copy per group in known
						} else {
							names[g] = g
						}
						if (!isKnown || k.svc != svc) && knownRoom > 0 {
							knownRoom--
							newKnown = append(newKnown, knownEntry{id: string(q.ID), knownHeld: knownHeld{group: g, svc: svc}})
						}
						rb.held(q, g, svc, keep(svc))
						if candidates[g] >= groupCap(svc) {
							skipped[g]++
							return true
						}
						candidates[g]++
						l := limited{rec: rec, demands: ds, buckets: bs}
						lastOf[g] = l
						waiting.push(g, rec.Invoke.Priority, l)
						return true
					}
				}
			}
			rb.end()
			// Passed over for a full service, as picked: against
			// ScanLimit, so a service without limits walks no further
			// than it did.
			if reads++; reads > iv.cfg.ScanLimit {
				return false
			}
			if busy[string(q.Service)] >= iv.cfg.ServiceConcurrency {
				prefix = false
				return true
			}
			if prefix {
				last = q
			}
			e := q.Entry()
			busy[e.Service]++
			picks = append(picks, e)
			return len(picks) < free
		}
		// Entries under way are passed over without copying.
		err := outbox.ScanQueuedFrom(b, start, visit)
		for err == nil && walkErr == nil && jumpTo != nil {
			from := jumpTo
			jumpTo = nil
			err = outbox.ScanQueuedFrom(b, from, visit)
		}
		if err == nil {
			err = walkErr
		}
		if err != nil {
			return err
		}
		if last.ID != nil {
			resume = last.Next()
		}
		// Admit the deliveries held by limits, round robin across keys.
		for len(picks)+len(lpicks) < free {
			l, ok := waiting.next(&iv.fairLast, func(l limited) bool {
				if busy[l.rec.Invoke.Service] >= iv.cfg.ServiceConcurrency {
					return false
				}
				for _, d := range l.demands {
					if counts[d.counter] >= d.limit {
						return false
					}
				}
				ok, at := iv.takeTokens(l.buckets, clock)
				if !ok {
					soonest(at.UnixMilli())
				}
				return ok
			})
			if !ok {
				break
			}
			for _, d := range l.demands {
				counts[d.counter]++
			}
			busy[l.rec.Invoke.Service]++
			lpicks = append(lpicks, l)
		}
		nskipped := 0
		for _, n := range skipped {
			nskipped += n
		}
		iv.p.metrics.waitingForLimit(waiting.len() + nskipped)
		iv.p.flow.endScan(iv.term.Load(), shares, counts, waiting, skipped, lastOf)
		nodeFull := len(picks)+len(lpicks) >= free
		waiting.each(func(l limited) {
			if heldBy == nil {
				heldBy = make(map[string]string, waiting.len())
			}
			heldBy[string(l.rec.Invoke.InvocationId)] = iv.holderOf(l, counts, busy, nodeFull, clock)
		})
		for g := range skipped {
			if skippedBy == nil {
				skippedBy = make(map[string]string, len(skipped))
			}
			// Behind the group's last candidate, held as it is.
			skippedBy[g] = iv.holderOf(lastOf[g], counts, busy, nodeFull, clock)
		}
		for _, e := range picks {
			rec, found, err := getRecord(b, e.ID)
			if err != nil {
				return err
			}
			if found && rec.State != rpc.InvocationRecord_COMPLETED {
				recs = append(recs, rec)
			}
		}
		return nil
	})
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.scanning = false
	iv.lastWalk, iv.lastReads = min(walked, iv.cfg.ScanLimit*scanWalkFactor), min(reads, iv.cfg.ScanLimit)
	if err != nil {
		iv.from = nil
		iv.skip, iv.runTo = nil, nil
		iv.p.logger.Error().Err(err).Msg("invoker: outbox scan failed")
		return 0
	}
	if len(recs) < len(picks) {
		// A pick without a pending record (an entry that should not be
		// queued) is not reserved: the next scan reads it again.
		resume = start
	}
	if iv.lowered {
		resume = lowerKey(resume, iv.low)
	}
	iv.from = resume
	iv.heldBy, iv.skippedBy = heldBy, skippedBy
	if next := rb.run(min(runMin, iv.cfg.ScanLimit*scanWalkFactor/4)); next != nil && iv.runGen == runGen && (!iv.lowered || iv.low != nil && bytes.Compare(iv.low, next.to) >= 0) {
		iv.skip, iv.runTo = next, next.to
	} else {
		iv.skip, iv.runTo = nil, nil
	}
	for _, k := range newKnown {
		if _, ok := iv.done[k.id]; !ok {
			iv.known[k.id] = k.knownHeld
		}
	}
	for _, h := range newHeld {
		if _, ok := iv.done[h.id]; !ok {
			iv.held[h.id] = h.heldMark
		}
	}
	for _, l := range lpicks {
		recs = append(recs, l.rec)
	}
	for i, rec := range recs {
		id := string(rec.Invoke.InvocationId)
		if _, ok := iv.done[id]; ok {
			continue // its outcome applied after our view was taken
		}
		if _, ok := iv.inflight[id]; ok {
			continue
		}
		iv.inflight[id] = struct{}{}
		if rec.State == rpc.InvocationRecord_SCHEDULED {
			// A delayed exclusive invocation is due: it enters its key's
			// queue when the Admit applies (keys.go); nothing is delivered.
			wg.Add(1)
			iv.workers.run(func() {
				defer wg.Done()
				iv.admit(ctx, rec.Invoke.InvocationId)
			})
			continue
		}
		mark := false
		if j := i - (len(recs) - len(lpicks)); j >= 0 && len(lpicks[j].demands) > 0 {
			// Counted against a concurrency limit: marked in state first.
			iv.holding[id] = counters(lpicks[j].demands)
			mark = true
		}
		iv.delivering[id] = struct{}{}
		iv.perService[rec.Invoke.Service]++
		wg.Add(1)
		iv.workers.run(func() {
			defer wg.Done()
			iv.deliver(ctx, rec, mark)
		})
	}
	return next
}

// deliver makes one attempt and proposes its outcome.
// A delivery under a concurrency limit (mark) is first marked under way
// in state (Start) and called with the mark's deadline.
func (iv *invoker) deliver(ctx context.Context, rec *rpc.InvocationRecord, mark bool) {
	inv := rec.Invoke
	id := inv.InvocationId
	attempt := rec.Attempts + 1
	if k := iv.p.cfg.Knobs; k != nil && k.BeforeOutboxSend != nil {
		k.BeforeOutboxSend(id, attempt)
	}
	// The retry policy in force is the one replicated with the service's
	// registration as this delivery starts: a changed policy applies from
	// the next delivery on, on whichever node leads.
	svc, lookupErr := iv.p.cfg.Services.Lookup(ctx, inv.Service)
	policy := iv.cfg.Retry.ForHandler(svc, inv.Handler)
	attemptID := strconv.FormatUint(iv.term.Load(), 10) + "." + strconv.FormatUint(iv.seq.Add(1), 10)
	var out attemptOutcome
	started := true
	if mark {
		deadline := time.Now().Add(policy.AttemptTimeout)
		started = iv.proposeStart(ctx, id, attempt, iv.p.now().Add(policy.AttemptTimeout).UnixMilli())
		if started {
			callCtx, cancel := context.WithDeadline(ctx, deadline)
			out = iv.call(callCtx, rec, attempt, attemptID, svc, lookupErr, policy.AttemptTimeout)
			cancel()
		}
	} else {
		out = iv.call(ctx, rec, attempt, attemptID, svc, lookupErr, policy.AttemptTimeout)
	}

	iv.mu.Lock()
	delete(iv.delivering, string(id))
	if iv.perService[inv.Service]--; iv.perService[inv.Service] <= 0 {
		delete(iv.perService, inv.Service)
	}
	iv.mu.Unlock()
	iv.kick() // a service slot is free

	if ctx.Err() != nil || !started {
		iv.release(id) // leadership lost (the next leader delivers again), or not marked
		return
	}
	if k := iv.p.cfg.Knobs; k != nil && k.AfterServiceAnswer != nil && !k.AfterServiceAnswer(id, attempt) {
		return // simulated crash: keep the reservation, propose nothing
	}
	iv.p.metrics.delivered(out.outcome)
	if out.outcome != outbox.Success {
		iv.p.logger.Debug().Str("invocation", idString(id)).Uint32("attempt", attempt).
			Stringer("outcome", out.outcome).Str("reason", out.reason).Msg("delivery failed")
	}
	now := iv.p.now()
	var cmd *rpc.Command
	switch {
	case out.outcome == outbox.Success || out.outcome == outbox.Terminal:
		out.result.Attempts = attempt
		cmd = completeCmd(&rpc.Complete{InvocationId: id, Result: out.result, ProposedAtUnixMs: now.UnixMilli()})
	case policy.Exhausted(attempt-rec.ResumedAfterAttempts) && policy.PauseOnMaxAttempts:
		// Kept, paused, until an operator acts (docs/operations.md).
		cmd = &rpc.Command{Cmd: &rpc.Command_Pause{Pause: &rpc.Pause{
			InvocationId:     id,
			Attempt:          attempt,
			Error:            "paused after " + itoa(attempt-rec.ResumedAfterAttempts) + " attempts: " + out.reason,
			ProposedAtUnixMs: now.UnixMilli(),
		}}}
	case policy.Exhausted(attempt - rec.ResumedAfterAttempts):
		res := out.result
		res.Failed = true
		res.Attempts = attempt
		res.Error = "gave up after " + itoa(attempt) + " attempts: " + out.reason
		cmd = completeCmd(&rpc.Complete{InvocationId: id, Result: res, ProposedAtUnixMs: now.UnixMilli()})
	default:
		iv.rndMu.Lock()
		delay := policy.Delay(attempt, out.retryAfter, iv.rnd)
		iv.rndMu.Unlock()
		cmd = attemptFailedCmd(&rpc.AttemptFailed{
			InvocationId:     id,
			Attempt:          attempt,
			Error:            out.reason,
			RetryAtUnixMs:    now.Add(delay).UnixMilli(),
			ProposedAtUnixMs: now.UnixMilli(),
		})
	}
	// Propose the outcome. A refusal while we still lead (a leader transfer
	// under way, a full uncommitted log) is retried rather than released:
	// releasing would deliver the invocation again for nothing.
	for try := 0; ; try++ {
		proposed := make(chan error, 1)
		iv.p.submit(ctx, cmd, func(err error) { proposed <- err })
		var err error
		select {
		case err = <-proposed:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err == nil {
			return // the reservation ends when the command applies
		}
		if ctx.Err() != nil || try >= outcomeProposeTries || !iv.sleep(ctx, outcomeRetryDelay) {
			iv.release(id)
			return
		}
	}
}

// admit proposes the Admit of a due SCHEDULED invocation; the reservation
// ends when it applies, or at once if the proposal is refused (the next
// scan tries again).
func (iv *invoker) admit(ctx context.Context, id []byte) {
	proposed := make(chan error, 1)
	iv.p.submit(ctx, admitCmd(&rpc.Admit{InvocationId: id, ProposedAtUnixMs: iv.p.now().UnixMilli()}), func(err error) { proposed <- err })
	var err error
	select {
	case err = <-proposed:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		iv.release(id)
	}
}

// How a refused outcome proposal is retried before the delivery is
// released (and repeated later).
const (
	outcomeProposeTries = 20
	outcomeRetryDelay   = 25 * time.Millisecond
)

func idString(b []byte) string {
	id, err := invocation.IDFromBytes(b)
	if err != nil {
		return fmt.Sprintf("%x", b)
	}
	return id.String()
}
