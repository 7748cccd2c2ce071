package cluster

import (
	"cmp"
	"math"
	"slices"

	"github.com/raftgate/raftgate/rpc"
)

// Demand is a partition leader's report on one limit (soft state).
type Demand struct {
	// Adopted is the version of the share the partition enforced when it
	// counted (0: the static split).
	Adopted           uint64
	InFlight, Waiting uint32
}

// ShareLimit is what PlanShares plans one limit's split from.
type ShareLimit struct {
	Key string
	// Figure is the limit as the registration says now.
	Figure uint32
	// Current is the recorded split; nil: none yet, the static split
	// holds (version 0).
	Current *rpc.FlowShares
	// Reports holds the fresh reports by partition; a partition without
	// one (its leader is gone, or has not counted yet) keeps its share
	// and its ceiling.
	Reports map[uint32]Demand
}

// RateFigure is a rate limit of r tokens a second as a split limit's
// figure: thousandths of a token a second (at least 1), so that a rate
// splits among partitions in whole units as a concurrency limit does.
func RateFigure(r float64) uint32 {
	return uint32(max(1, min(math.Round(r*1000), math.MaxUint32)))
}

// StaticShare is partition p's (1..parts) part of figure n before any
// split is recorded: n/P, plus one for the first n mod P partitions.
func StaticShare(n, parts, p uint32) uint32 {
	parts = max(parts, 1)
	s := n / parts
	if (p-1)%parts < n%parts {
		s++
	}
	return s
}

// PlanShares returns the next split of a limit among parts partitions,
// or nil when it stays as it is. The result's Version is the one it
// expects (SetFlowShares).
//
//   - A ceiling comes down to its share once the partition reports that
//     it enforces the share's version and has no more than it in flight.
//   - Shares move only when some partition has deliveries waiting and its
//     fair share exceeds what it holds by a margin (hysteresis): the
//     figure, less what partitions without a report hold, goes to the
//     partitions with demand (in flight plus waiting), one each first
//     (most demand first, then those that hold a share), the rest in
//     proportion to demand, never beyond it; what is left stays with the
//     partitions that hold it.
//   - A share is lowered at once; one is raised only as far as the
//     ceilings leave room (Σ ceilings ≤ figure), so the raise waits until
//     the partitions that gave the room up confirmed; raises go to the
//     partitions with the most demand first.
func PlanShares(parts uint32, l ShareLimit) *rpc.FlowShares {
	n := int(l.Figure)
	if n == 0 || parts == 0 {
		return nil
	}
	sh, ceil, ver := make([]int, parts), make([]int, parts), make([]uint64, parts)
	if l.Current != nil {
		if len(l.Current.Parts) != int(parts) {
			return nil
		}
		for i, p := range l.Current.Parts {
			sh[i], ceil[i], ver[i] = int(p.Share), int(p.Ceiling), p.Version
		}
	} else {
		for i := range sh {
			sh[i] = int(StaticShare(l.Figure, parts, uint32(i+1)))
			ceil[i] = sh[i]
		}
	}
	changed := l.Current != nil && l.Current.Figure != l.Figure
	// Confirmations: the partition enforces the share and is within it.
	for i := range sh {
		if r, ok := l.Reports[uint32(i+1)]; ok && r.Adopted == ver[i] && int(r.InFlight) <= sh[i] && ceil[i] != sh[i] {
			ceil[i] = sh[i]
			changed = true
		}
	}
	// Targets.
	target := slices.Clone(sh)
	wanting := false
	for _, r := range l.Reports {
		wanting = wanting || r.Waiting > 0
	}
	if wanting || sum(sh) > n {
		target = fairShares(parts, n, sh, l.Reports)
	}
	move := sum(sh) > n
	for i := range target {
		r := l.Reports[uint32(i+1)]
		if r.Waiting > 0 && target[i] > sh[i] && (sh[i] == 0 || target[i]-sh[i] >= max(1, target[i]/8)) {
			move = true
		}
	}
	if move {
		// Lower at once, then raise within the room, most waiting first.
		for i := range target {
			if target[i] < sh[i] {
				sh[i], changed = target[i], true
			}
		}
		room := n - sum(ceil)
		for _, i := range byDemand(parts, target, l.Reports) {
			for sh[i] < target[i] && (sh[i] < ceil[i] || room > 0) {
				if sh[i] >= ceil[i] {
					ceil[i]++
					room--
				}
				sh[i]++
				changed = true
			}
		}
	}
	if !changed {
		return nil
	}
	out := &rpc.FlowShares{Key: l.Key, Figure: l.Figure}
	if l.Current != nil {
		out.Version = l.Current.Version
	}
	for i := range sh {
		out.Parts = append(out.Parts, &rpc.FlowShare{Share: uint32(sh[i]), Ceiling: uint32(ceil[i]), Version: ver[i]})
	}
	return out
}

// fairShares splits n among the partitions: those without a report keep
// their share (lowered if they alone exceed n); those with demand get one
// each (most demand first), then the rest in proportion to demand
// (largest quotient first), never beyond it; what is left goes back to
// the partitions that hold it now.
func fairShares(parts uint32, n int, sh []int, reports map[uint32]Demand) []int {
	t := make([]int, parts)
	avail := n
	for i := range t {
		if _, ok := reports[uint32(i+1)]; !ok {
			t[i] = min(sh[i], avail)
			avail -= t[i]
		}
	}
	demand := func(i int) int {
		r := reports[uint32(i+1)]
		return int(r.InFlight) + int(r.Waiting)
	}
	order := byDemand(parts, sh, reports)
	for _, i := range order {
		if avail > 0 && demand(i) > 0 {
			t[i]++
			avail--
		}
	}
	for avail > 0 {
		best := -1
		for _, i := range order {
			// D'Hondt: the largest demand/(held+1) next.
			if d := demand(i); d > t[i] && (best < 0 || d*(t[best]+1) > demand(best)*(t[i]+1)) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		t[best]++
		avail--
	}
	for _, i := range order {
		if add := min(avail, sh[i]-t[i]); add > 0 {
			t[i] += add
			avail -= add
		}
	}
	return t
}

// byDemand lists the reporting partitions' indexes, most demand (in
// flight plus waiting) first, then those holding a share (so that a
// share does not move back and forth between equals), then by partition.
func byDemand(parts uint32, sh []int, reports map[uint32]Demand) []int {
	var out []int
	for i := range int(parts) {
		if _, ok := reports[uint32(i+1)]; ok {
			out = append(out, i)
		}
	}
	demand := func(i int) uint64 {
		r := reports[uint32(i+1)]
		return uint64(r.InFlight) + uint64(r.Waiting)
	}
	slices.SortStableFunc(out, func(a, b int) int {
		if c := cmp.Compare(demand(b), demand(a)); c != 0 {
			return c
		}
		return cmp.Compare(min(sh[b], 1), min(sh[a], 1))
	})
	return out
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
