package partition

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// Flow shares: a partition's part of each cluster-wide concurrency limit
// (docs/operations.md, "Protecting services"). The metadata group holds
// the split (cluster/shares.go); a partition enforces only what it adopted
// through its own log (AdoptShare), so a new leader reads its share from
// state and the leader that lowered its share counts against the lower
// figure only from the moment the adoption applied. Until a limit's first
// split is adopted a partition takes its part of the static split
// (cluster.StaticShare), which may be 0: the parts add up to the limit.
//
// The invoker's scan enforces the adopted table and, when done, leaves
// what it counted (in flight, from its reservations, unapplied Starts
// included, and the marks in state; and waiting) for the leader's demand
// report (FlowReport), which the metadata leader plans the next split
// from.

// sharesBucket: limit key → 8-byte big-endian version, 4-byte share.
var sharesBucket = []byte("flowshares")

// adopted is a partition's share of one limit, as adopted.
type adopted struct {
	version uint64
	share   uint32
}

// flowShares is the processor's view of its adopted shares and the
// leader's last count of the demand on them.
type flowShares struct {
	// table is the adopted shares as revealed; replaced, never changed.
	table atomic.Pointer[map[string]adopted]

	mu     sync.Mutex
	demand *rpc.FlowReport // the last scan's count; nil until one this term
}

// shareOf is this partition's adopted share of limit key with figure n.
func (iv *invoker) shareOf(key string, n uint32) int {
	if a, ok := iv.p.flow.current()[key]; ok {
		return int(a.share)
	}
	return int(cluster.StaticShare(n, iv.p.cfg.Partitions, iv.p.cfg.Partition))
}

// current returns the adopted shares (nil: none).
func (f *flowShares) current() map[string]adopted {
	if t := f.table.Load(); t != nil {
		return *t
	}
	return nil
}

// endScan leaves what a scan counted for the demand report: counts are
// the deliveries in flight per counter, waiting those held back (with,
// per group, the skipped ones it passed over behind lastOf), and
// shares the adopted table when the scan began. The report names the
// versions of that table: a share adopted during the scan may have
// gated some of it, and the metadata leader confirms a version only
// from a report that names it.
func (f *flowShares) endScan(term uint64, shares map[string]adopted, counts map[string]int, waiting *fairQueue[limited], skipped map[string]int, lastOf map[string]limited) {
	per := map[string]*rpc.FlowDemand{}
	demand := func(key string) *rpc.FlowDemand {
		d, ok := per[key]
		if !ok {
			d = &rpc.FlowDemand{Key: key, Adopted: shares[key].version}
			per[key] = d
		}
		return d
	}
	for key := range shares {
		demand(key) // reported even when idle: its version confirms a lowering
	}
	for key, n := range counts {
		if splitKey(key) {
			demand(key).InFlight = uint32(n)
		}
	}
	waiting.each(func(l limited) {
		for _, d := range l.demands {
			if splitKey(d.counter) {
				demand(d.counter).Waiting++
			}
		}
		for _, b := range l.buckets {
			demand(b.share).Waiting++ // a rate has nothing in flight
		}
	})
	// The deliveries passed over wait as their group's last candidate.
	for g, n := range skipped {
		for _, d := range lastOf[g].demands {
			if splitKey(d.counter) {
				demand(d.counter).Waiting += uint32(n)
			}
		}
	}
	r := &rpc.FlowReport{Term: term}
	for _, key := range slices.Sorted(maps.Keys(per)) {
		r.Demand = append(r.Demand, per[key])
	}
	f.mu.Lock()
	f.demand = r
	f.mu.Unlock()
}

// forget drops the demand count: a new term reports only once it scanned
// (its first scan counts the marks earlier leaders left in state).
func (f *flowShares) forget() {
	f.mu.Lock()
	f.demand = nil
	f.mu.Unlock()
}

// splitKey reports whether a flow-control counter is a cluster-wide
// concurrency limit split among partitions (a service's, a handler's, a
// scope's), not a key's, which lives in one partition.
func splitKey(counter string) bool {
	return strings.HasPrefix(counter, "s\x00") || strings.HasPrefix(counter, "h\x00") || strings.HasPrefix(counter, "r\x00")
}

// FlowReport returns the demand on the split limits as this leader's
// last scan counted it, for the metadata leader; false before the first
// scan of this term, or when not leading.
func (p *Processor) FlowReport() (*rpc.FlowReport, bool) {
	leading, _, term := p.tracker.Leadership()
	p.flow.mu.Lock()
	r := p.flow.demand
	p.flow.mu.Unlock()
	if !leading || r == nil || r.Term != term {
		return nil, false
	}
	out := &rpc.FlowReport{Partition: p.cfg.Partition, Term: r.Term, Demand: r.Demand}
	return out, true
}

// AdoptedShare returns the adopted share of limit key and its version
// (0: none adopted; the static split holds).
func (p *Processor) AdoptedShare(key string) (version uint64, share uint32) {
	if t := p.flow.table.Load(); t != nil {
		a := (*t)[key]
		return a.version, a.share
	}
	return 0, 0
}

// AdoptShares proposes the adoption of shares (leader only) and returns
// once the proposals were handed to the log; they take effect when they
// apply.
func (p *Processor) AdoptShares(ctx context.Context, shares []*rpc.AdoptShare) error {
	var errs []error
	for _, s := range shares {
		done := make(chan error, 1)
		p.submit(ctx, &rpc.Command{Cmd: &rpc.Command_AdoptShare{AdoptShare: s}}, func(err error) { done <- err })
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// adoptShare stores an AdoptShare whose version is above the adopted one.
func (m *machine) adoptShare(b *bolt.Bucket, c *rpc.AdoptShare, fx *effects) error {
	sb, err := b.CreateBucketIfNotExists(sharesBucket)
	if err != nil {
		return fmt.Errorf("partition: shares bucket: %w", err)
	}
	if v := sb.Get([]byte(c.Key)); len(v) == 12 && binary.BigEndian.Uint64(v) >= c.Version {
		return nil
	}
	val := binary.BigEndian.AppendUint64(nil, c.Version)
	val = binary.BigEndian.AppendUint32(val, c.Share)
	if err := sb.Put([]byte(c.Key), val); err != nil {
		return fmt.Errorf("partition: adopt share: %w", err)
	}
	fx.adopted = append(fx.adopted, c)
	return nil
}

// load reads the adopted shares from state (Restore).
func (f *flowShares) load(b *bolt.Bucket) error {
	t := map[string]adopted{}
	if sb := b.Bucket(sharesBucket); sb != nil {
		err := sb.ForEach(func(k, v []byte) error {
			if len(v) != 12 {
				return fmt.Errorf("partition: adopted share %q: %d bytes", k, len(v))
			}
			t[string(k)] = adopted{version: binary.BigEndian.Uint64(v), share: binary.BigEndian.Uint32(v[8:])}
			return nil
		})
		if err != nil {
			return err
		}
	}
	f.table.Store(&t)
	return nil
}

// applied publishes adoptions that applied (Reveal); it reports whether
// any changed the table.
func (f *flowShares) applied(cs []*rpc.AdoptShare) bool {
	if len(cs) == 0 {
		return false
	}
	t := map[string]adopted{}
	if cur := f.table.Load(); cur != nil {
		t = maps.Clone(*cur)
	}
	changed := false
	for _, c := range cs {
		if t[c.Key].version < c.Version {
			t[c.Key] = adopted{version: c.Version, share: c.Share}
			changed = true
		}
	}
	f.table.Store(&t)
	return changed
}
