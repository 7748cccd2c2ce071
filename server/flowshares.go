package server

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// Flow shares (docs/operations.md, "Protecting services"): each round of
// the reconciler, the leader of each partition adopts, through its log,
// the shares the cluster record gives it and reports the demand its
// invoker counted to the metadata leader; the metadata leader plans the
// next split of every limit (cluster.PlanShares) from the fresh reports.
// Reports are soft state, kept in memory by whichever node leads the
// metadata group; a partition whose report is missing or old keeps its
// share until it reports again.

// reportTTL is how long a partition's demand report counts.
const reportTTL = 4 * membershipRound

// flowReports are the demand reports the metadata leader received.
type flowReports struct {
	mu   sync.Mutex
	last map[uint32]flowReport // by partition
}

type flowReport struct {
	at     time.Time
	report *rpc.FlowReport
}

func (f *flowReports) put(r *rpc.FlowReport, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[uint32]flowReport{}
	}
	if cur, ok := f.last[r.Partition]; ok && cur.report.Term > r.Term {
		return // a deposed leader's
	}
	f.last[r.Partition] = flowReport{at: now, report: r}
}

// fresh returns the reports younger than reportTTL.
func (f *flowReports) fresh(now time.Time) map[uint32]*rpc.FlowReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[uint32]*rpc.FlowReport{}
	for p, r := range f.last {
		if now.Sub(r.at) < reportTTL {
			out[p] = r.report
		}
	}
	return out
}

// flowService serves the FlowControl gRPC service: a report goes to the
// metadata leader.
type flowService struct {
	rpc.UnimplementedFlowControlServer
	n *Server
}

func (s flowService) Report(ctx context.Context, r *rpc.FlowReport) (*rpc.FlowReportReply, error) {
	if !s.n.meta.Status().IsLeader {
		return nil, status.Error(codes.Unavailable, "not the metadata leader")
	}
	s.n.flowReports.put(r, time.Now())
	return &rpc.FlowReportReply{}, nil
}

// flowShares is the reconciler's flow-shares round.
func (n *Server) flowShares(ctx context.Context, st *cluster.State) {
	ctx, cancel := context.WithTimeout(ctx, confStepTimeout)
	defer cancel()
	var reports []*rpc.FlowReport
	for _, p := range n.parts.ids() {
		proc, g := n.parts.get(p), n.raft.Group(raftlog.GroupID(p))
		if proc == nil || g == nil || !g.Status().IsLeader {
			continue
		}
		var adopt []*rpc.AdoptShare
		for _, f := range st.Shares {
			if int(p) > len(f.Parts) {
				continue
			}
			part := f.Parts[p-1]
			if v, _ := proc.AdoptedShare(f.Key); part.Version > v {
				adopt = append(adopt, &rpc.AdoptShare{Key: f.Key, Version: part.Version, Share: part.Share})
			}
		}
		if len(adopt) > 0 {
			if err := proc.AdoptShares(ctx, adopt); err != nil {
				n.log.Debug().Err(err).Uint32("partition", p).Msg("flow shares: adoption not proposed; trying again")
			}
		}
		if r, ok := proc.FlowReport(); ok {
			reports = append(reports, r)
		}
	}
	if n.meta.Status().IsLeader {
		for _, r := range reports {
			n.flowReports.put(r, time.Now())
		}
		n.planShares(ctx, st)
	} else if addr, ok := (membershipService{n: n}).leaderElsewhere(); ok && len(reports) > 0 {
		if err := sendReports(ctx, addr, n.dialOpts, reports); err != nil {
			n.log.Debug().Err(err).Msg("flow shares: demand not reported; trying again")
		}
	}
}

func sendReports(ctx context.Context, addr string, dialOpts []grpc.DialOption, reports []*rpc.FlowReport) error {
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := rpc.NewFlowControlClient(conn)
	for _, r := range reports {
		if _, err := c.Report(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// planShares, on the metadata leader, records the next split of every
// limit that a record or a fresh report names.
func (n *Server) planShares(ctx context.Context, st *cluster.State) {
	fresh := n.flowReports.fresh(time.Now())
	keys := map[string]bool{}
	for _, f := range st.Shares {
		keys[f.Key] = true
	}
	for _, r := range fresh {
		for _, d := range r.Demand {
			keys[d.Key] = true
		}
	}
	var changes []*rpc.FlowShares
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		l := cluster.ShareLimit{Key: key, Figure: n.limitFigure(key), Reports: map[uint32]cluster.Demand{}}
		l.Current, _ = st.FlowShares(key)
		// A partition whose deliveries wait on a rate wants all of it (a
		// scan reads only a few of a backlog's deliveries, so their count
		// says little): partitions that wait split the rate evenly.
		isRate := strings.HasPrefix(key, "S\x00") || strings.HasPrefix(key, "H\x00")
		for p, r := range fresh {
			d := cluster.Demand{}
			if i := slices.IndexFunc(r.Demand, func(d *rpc.FlowDemand) bool { return d.Key == key }); i >= 0 {
				d = cluster.Demand{Adopted: r.Demand[i].Adopted, InFlight: r.Demand[i].InFlight, Waiting: r.Demand[i].Waiting}
				if isRate && d.Waiting > 0 {
					d.Waiting = l.Figure
				}
			}
			l.Reports[p] = d
		}
		if next := cluster.PlanShares(n.cfg.Partitions, l); next != nil {
			changes = append(changes, next)
		}
	}
	if len(changes) == 0 {
		return
	}
	if err := n.cluster.SetFlowShares(ctx, changes); err != nil {
		n.log.Debug().Err(err).Msg("flow shares: split not changed; trying again")
		return
	}
	for _, c := range changes {
		shares := make([]uint32, len(c.Parts))
		for i, p := range c.Parts {
			shares[i] = p.Share
		}
		n.log.Debug().Str("limit", strings.ReplaceAll(c.Key, "\x00", "/")).Uint32("figure", c.Figure).Uints32("shares", shares).Msg("flow shares: split changed")
	}
}

// limitFigure returns the cluster-wide figure of a limit key (see
// partition/flow.go): a concurrency, or a rate as cluster.RateFigure; 0
// when it is no longer limited.
func (n *Server) limitFigure(key string) uint32 {
	kind, rest, _ := strings.Cut(key, "\x00")
	rate := func(l *rpc.Limits) uint32 {
		if r := l.GetRatePerSecond(); r > 0 {
			return cluster.RateFigure(r)
		}
		return 0
	}
	switch kind {
	case "S":
		svc, _ := n.registry.Lookup(rest)
		return rate(svc.GetLimits())
	case "H":
		name, handler, _ := strings.Cut(rest, "\x00")
		svc, _ := n.registry.Lookup(name)
		for _, hc := range svc.GetHandlerConfig() {
			if hc.GetHandler() == handler {
				return rate(hc.GetLimits())
			}
		}
	case "s":
		svc, _ := n.registry.Lookup(rest)
		return svc.GetLimits().GetConcurrency()
	case "h":
		name, handler, _ := strings.Cut(rest, "\x00")
		svc, _ := n.registry.Lookup(name)
		for _, hc := range svc.GetHandlerConfig() {
			if hc.GetHandler() == handler {
				return hc.GetLimits().GetConcurrency()
			}
		}
	case "r":
		if rule, ok := n.registry.RuleFor(rest); ok {
			return rule.Concurrency
		}
	}
	return 0
}
