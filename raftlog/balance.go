package raftlog

import (
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// maxBalanceBackoff caps how far repeated hand-offs of one group stretch
// the interval between checks (LeaderBalanceTicks << maxBalanceBackoff).
const maxBalanceBackoff = 6

// PreferredLeader is the voter that should lead group id when it is up:
// the group's position in the sorted voter list, so that P groups spread
// over N voters as evenly as P allows. Every node computes the same answer
// from the group's configuration, with no coordination.
func PreferredLeader(id GroupID, voters []uint64) uint64 {
	if len(voters) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(voters))
	return sorted[int(uint64(id)%uint64(len(sorted)))]
}

// SetPreferredLeader names the node that should lead the group when it is
// up (the cluster's placement records one per partition); 0 goes back to
// PreferredLeader's choice. A node that is not a voter of the group is
// ignored until it is one. Safe to call from any goroutine.
func (g *Group) SetPreferredLeader(node uint64) { g.preferredNode.Store(node) }

// preferredVoter returns the replica balancing hands the group to: the
// node SetPreferredLeader named when it is a voter, else PreferredLeader's
// choice; 0 while balancing is off or the group is joint.
func (g *Group) preferredVoter() uint64 {
	if g.preferred == 0 {
		return 0
	}
	if node := g.preferredNode.Load(); node != 0 {
		for _, r := range g.Membership().Voters {
			if NodeOf(r) == node {
				return r
			}
		}
	}
	return g.preferred
}

// balanceLeadership runs on the group's loop on every iteration, with the
// ticks it handled (loop-owned state). A leader that has led for
// LeaderBalanceTicks hands the group to its preferred voter once that voter
// is another node, recently active and replicating: raft then brings it up
// to the leader's last index and tells it to campaign at once, so the
// hand-off costs about one round trip and one election, during which
// proposals fail with ErrProposalDropped and callers retry. Readiness is
// looked at on every iteration once the interval is due, not only on ticks:
// the leader clears every RecentActive flag on the tick that ends an
// election timeout, and heartbeat responses set them again between ticks.
//
// A hand-off that does not hold (the preferred voter fails to win, or loses
// the leadership again) doubles the interval before this node tries again,
// up to 64 times; seeing the preferred voter lead for a whole interval
// resets it.
func (g *Group) balanceLeadership(ticks int) {
	to := g.preferredVoter()
	if to == 0 {
		return
	}
	every := g.n.cfg.LeaderBalanceTicks
	g.balanceTicks += ticks
	if !g.isLeader {
		if g.balanceTicks >= every && g.leader.Load().Leader == NodeOf(to) {
			g.balanceBackoff = 0
		}
		return
	}
	if g.balanceTicks < every<<g.balanceBackoff {
		return
	}
	if to == g.self {
		g.balanceTicks, g.balanceBackoff = 0, 0
		return
	}
	if st := g.rn.BasicStatus(); st.RaftState != raft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	ready := false
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == to {
			ready = pr.RecentActive && pr.State == tracker.StateReplicate
		}
	})
	if !ready {
		return
	}
	g.balanceTicks = 0
	g.balanceBackoff = min(g.balanceBackoff+1, maxBalanceBackoff)
	g.n.metrics.leaderHandoffs.Inc()
	g.log.Info().Uint64("to", to).Msg("handing leadership to the group's preferred voter")
	g.rn.TransferLeader(to)
}
