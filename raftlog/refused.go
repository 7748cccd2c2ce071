package raftlog

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNotAMember stops a node whose peers refuse its raft messages because
// it is not one of their voters, so many of them that it can never be part
// of a quorum: it was started with an --initial-cluster that names it, next
// to a cluster whose voters do not include it. A cluster's voters are fixed
// when it first starts, so no retry helps; the node stops instead of
// campaigning forever.
var ErrNotAMember = errors.New("raftlog: this node is not a voter of the cluster its peers run: they refuse its raft messages")

// peerRefusals are the peers whose last answer refused this node's raft
// messages, with the reason they gave. A peer leaves the set when it sends
// this node a batch that is accepted (it counts this node among its peers).
type peerRefusals struct {
	// mu guards by.
	mu sync.Mutex
	by map[uint64]string
}

// refusedReason returns the reason a peer gave for refusing a batch (see
// raftServer.accept), or false when err is no refusal.
func refusedReason(err error) (string, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.PermissionDenied {
		return "", false
	}
	reason, ok := strings.CutPrefix(st.Message(), errRefused.Error()+": ")
	return reason, ok
}

// refusalAdvice is what to do about a refusal, as the refused node sees it.
func refusalAdvice(reason string) string {
	switch reason {
	case refusedNotAPeer:
		return "a peer refuses this node's raft messages: this node is not one of the voters of the cluster that peer runs. " +
			"A node does not join by naming itself in --initial-cluster: it joins with --join and no --node-id (docs/operations.md, \"Adding, removing and replacing nodes\"). " +
			"Stop this node; every node of a cluster is started with the same --initial-cluster"
	case refusedNotAddressee:
		return "a peer refuses this node's raft messages: another node listens at the address --initial-cluster gives for it; " +
			"fix --initial-cluster (the same on every node, each id with the address of that node's --node-addr)"
	default:
		return "a peer refuses this node's raft messages"
	}
}

// peerRefused records that peer refused this node's messages for reason.
// When the peers that refuse because this node is not their voter leave
// fewer voters than a quorum, the node fails with ErrNotAMember.
func (n *Node) peerRefused(peer uint64, reason string) {
	r := &n.refusals
	r.mu.Lock()
	if r.by == nil {
		r.by = map[uint64]string{}
	}
	r.by[peer] = reason
	var notMember []uint64
	for id, why := range r.by {
		if why == refusedNotAPeer {
			notMember = append(notMember, id)
		}
	}
	r.mu.Unlock()
	voters := len(n.cfg.Peers)
	if voters-len(notMember) >= voters/2+1 {
		return
	}
	slices.Sort(notMember)
	n.reportFailure(fmt.Errorf("%w: nodes %v of --initial-cluster %v do not count node %d among their voters",
		ErrNotAMember, notMember, slices.Sorted(maps.Keys(n.cfg.Peers)), n.cfg.NodeID))
}

// peerAccepts forgets a refusal of peer: it sent this node messages.
func (n *Node) peerAccepts(peer uint64) {
	r := &n.refusals
	r.mu.Lock()
	delete(r.by, peer)
	r.mu.Unlock()
}
