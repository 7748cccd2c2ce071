package server

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/internal/buildinfo"
	"github.com/raftgate/raftgate/leadership"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// A node's part in the cluster's membership (docs/operations.md, "Adding,
// removing and replacing nodes"):
//
//   - Identity. The cluster record (package cluster) lives in the metadata
//     group; each node keeps its own identity (cluster id, node id) in
//     cluster.IdentityFile in its data dir.
//   - Bootstrap and takeover. A node started with --node-id and
//     --initial-cluster is one of the cluster's first nodes. The metadata
//     leader creates the record once every voter describes itself on the
//     Membership service (a release that does not serve it answers
//     UNIMPLEMENTED: that is the version gate), for a new cluster and for
//     one an earlier release bootstrapped alike.
//   - Join. A node started with neither, on an empty data dir, finds the
//     members through gossip (--join), asks one for an id (Join, forwarded
//     to the metadata leader), writes its identity, and opens a blank
//     replica of every group, which the groups' leaders add as a learner.
//   - The reconciler (reconcile) runs on every node: it keeps the
//     transport's, the dispatch client's and gossip's peers equal to the
//     record's members, drives the configuration of every group this node
//     leads one step at a time (cluster.PlanGroup), and on the metadata
//     leader moves nodes from state to state (cluster.PlanNodes). A node
//     that learns it was removed stops.

// membershipRound is how often the reconciler looks again when nothing
// told it to (a learner catching up, a node that died).
const membershipRound = 500 * time.Millisecond

// confStepTimeout bounds one configuration change.
const confStepTimeout = 10 * time.Second

// joinTimeout bounds a join: discovery, and the metadata leader's answer.
const joinTimeout = 2 * time.Minute

// ErrRemovedNode stops a node the cluster removed.
var ErrRemovedNode = errors.New("this node was removed from the cluster")

// joinMode reports whether cfg starts a node without --node-id and
// --initial-cluster: a node that joins (or joined) a running cluster.
func (c Config) joinMode() bool { return c.NodeID == 0 && len(c.InitialCluster) == 0 }

// selfDescription is what this node tells the cluster about itself.
func (n *Server) selfDescription() *rpc.ClusterNode {
	gossip := n.cfg.AdvertiseGossipAddr
	if gossip == "" {
		gossip = n.cfg.GossipAddr
	}
	return &rpc.ClusterNode{
		Id:          n.cfg.NodeID,
		NodeAddr:    n.advertisedNodeAddr(),
		IngressAddr: n.cfg.IngressAddr,
		AdminAddr:   n.cfg.AdminAddr,
		GossipAddr:  gossip,
		Zone:        n.cfg.Zone,
		Replaces:    n.cfg.Replace,
	}
}

// advertisedNodeAddr is the address the others dial to reach this node:
// its --initial-cluster entry for a first node, else --node-addr.
func (n *Server) advertisedNodeAddr() string {
	if a := n.cfg.InitialCluster[n.cfg.NodeID]; a != "" {
		return a
	}
	return n.cfg.NodeAddr
}

// prepareIdentity runs before the data dir is opened. For a first node it
// checks the identity file against --node-id. For a joining node it reads
// its id from the identity file (a restart), or joins the cluster to get
// one; then cfg.NodeID is set.
func (n *Server) prepareIdentity(dialOpts []grpc.DialOption) error {
	id, ok, err := cluster.LoadIdentity(n.cfg.DataDir)
	if err != nil {
		return err
	}
	if !n.cfg.joinMode() {
		if ok && id.NodeID != 0 && id.NodeID != n.cfg.NodeID {
			return fmt.Errorf("%w: --node-id %d, but the data dir %s is node %d's (%s)", ErrInvalidConfig, n.cfg.NodeID, n.cfg.DataDir, id.NodeID, cluster.IdentityFile)
		}
		return nil
	}
	n.joined = true
	if ok && id.Complete() {
		n.log = n.log.With().Uint64("node", id.NodeID).Logger()
		// A restart: the peers come from the record in state.db, or, while
		// this node's replica of the metadata group is still blank, from
		// gossip.
		n.cfg.NodeID, n.cfg.Partitions = id.NodeID, id.Partitions
		n.joinMembers = n.discoverMembers()
		return nil
	}
	if !ok && !isEmptyDataDir(n.cfg.DataDir) {
		return fmt.Errorf("%w: --data-dir %s holds data but no %s: it is not a node's that joined a cluster; start it with the --node-id and --initial-cluster it was created with, or join with an empty data dir",
			ErrInvalidConfig, n.cfg.DataDir, cluster.IdentityFile)
	}
	if id.JoinNonce == "" {
		// Kept before the first request, so a join retried after a crash
		// gets the id the first one was given.
		id.JoinNonce = hex.EncodeToString(cluster.NewClusterID())
		if err := cluster.SaveIdentity(n.cfg.DataDir, id); err != nil {
			return err
		}
	}
	return n.join(id, dialOpts)
}

// join asks the cluster for an id and writes the identity it got.
func (n *Server) join(id cluster.Identity, dialOpts []grpc.DialOption) error {
	if len(n.cfg.Join) == 0 {
		return fmt.Errorf("%w: a node without --node-id joins a running cluster: --join must list gossip addresses of its members", ErrInvalidConfig)
	}
	nonce, err := hex.DecodeString(id.JoinNonce)
	if err != nil {
		return fmt.Errorf("%s: bad join nonce: %w", cluster.IdentityFile, err)
	}
	host, _, err := net.SplitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
	defer cancel()
	n.log.Info().Strs("join", n.cfg.Join).Uint64("replace", n.cfg.Replace).Msg("joining the cluster: no --node-id and an empty data dir")
	self := n.selfDescription()
	self.JoinNonce = nonce
	var reply *rpc.JoinReply
	for reply == nil {
		members, err := leadership.Discover(n.cfg.Join, host, n.cfg.GossipKey, time.Until(deadlineOf(ctx)), n.log)
		if err != nil {
			return fmt.Errorf("join: %w", err)
		}
		for _, m := range members {
			if m.NodeAddr == "" {
				continue
			}
			r, err := callJoin(ctx, m.NodeAddr, dialOpts, &rpc.JoinRequest{Node: self})
			if err == nil {
				reply = r
				break
			}
			switch status.Code(err) {
			case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated:
				return fmt.Errorf("join refused by node %d at %s: %s", m.ID, m.NodeAddr, status.Convert(err).Message())
			}
			n.log.Debug().Err(err).Uint64("member", m.ID).Msg("join: no answer yet; trying another member")
		}
		if reply == nil {
			select {
			case <-ctx.Done():
				return fmt.Errorf("join: no member answered within %v", joinTimeout)
			case <-time.After(membershipRound):
			}
		}
	}
	n.cfg.Failpoint.reach("after-join-reply", n.log)
	id.ClusterID = hex.EncodeToString(reply.ClusterId)
	id.NodeID = reply.Node.GetId()
	id.Partitions = reply.Partitions
	if err := cluster.SaveIdentity(n.cfg.DataDir, id); err != nil {
		return err
	}
	n.cfg.NodeID, n.cfg.Partitions = id.NodeID, id.Partitions
	n.joinMembers = reply.Members
	n.log = n.log.With().Uint64("node", id.NodeID).Logger()
	n.log.Info().Uint64("node", id.NodeID).Str("cluster", id.ClusterID).Uint32("partitions", reply.Partitions).
		Msg("joined the cluster: this node is a learner of every group until it caught up, then a voter")
	return nil
}

// restartDiscovery bounds the gossip discovery of a joined node's
// restart: its record usually names the peers already.
const restartDiscovery = 5 * time.Second

// discoverMembers finds the members through --join for a joined node's
// restart; none when gossip does not answer in time.
func (n *Server) discoverMembers() []*rpc.ClusterNode {
	host, _, err := net.SplitHostPort(n.cfg.GossipAddr)
	if err != nil || len(n.cfg.Join) == 0 {
		return nil
	}
	infos, err := leadership.Discover(n.cfg.Join, host, n.cfg.GossipKey, restartDiscovery, n.log)
	if err != nil {
		n.log.Warn().Err(err).Msg("restart: no member found through --join; the peers come from this node's copy of the cluster record")
		return nil
	}
	var out []*rpc.ClusterNode
	for _, in := range infos {
		out = append(out, &rpc.ClusterNode{Id: in.ID, NodeAddr: in.NodeAddr})
	}
	return out
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// callJoin calls Join on the node at addr.
func callJoin(ctx context.Context, addr string, dialOpts []grpc.DialOption, req *rpc.JoinRequest) (*rpc.JoinReply, error) {
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, confStepTimeout)
	defer cancel()
	return rpc.NewMembershipClient(conn).Join(cctx, req)
}

// initialPeers are the addresses raftlog, the dispatch client and gossip
// start with: --initial-cluster for a first node; for a joined node what
// the join answered, or (a restart) itself only, until the record restored
// from its state says more (applyRecord).
func (n *Server) initialPeers() map[uint64]string {
	if len(n.cfg.InitialCluster) > 0 {
		return maps.Clone(n.cfg.InitialCluster)
	}
	peers := map[uint64]string{n.cfg.NodeID: n.cfg.NodeAddr}
	for _, m := range n.joinMembers {
		if m.Id != n.cfg.NodeID && m.NodeAddr != "" {
			peers[m.Id] = m.NodeAddr
		}
	}
	return peers
}

// addGroup opens this node's replica of group id: a first node's groups
// start with the --initial-cluster voters; a joined node's replicas are
// blank until their leader sends a snapshot.
func (n *Server) addGroup(id raftlog.GroupID, sm raftlog.StateMachine) (*raftlog.Group, error) {
	if n.joined {
		return n.raft.JoinGroup(id, raftlog.ReplicaID(n.cfg.NodeID, 0), sm)
	}
	return n.raft.AddGroup(id, slices.Sorted(maps.Keys(n.cfg.InitialCluster)), sm)
}

// membershipService serves the Membership gRPC service.
type membershipService struct {
	rpc.UnimplementedMembershipServer
	n        *Server
	dialOpts []grpc.DialOption
}

func (s membershipService) Describe(context.Context, *rpc.DescribeRequest) (*rpc.DescribeReply, error) {
	return &rpc.DescribeReply{Node: s.n.selfDescription(), Version: buildinfo.Read().Version}, nil
}

func (s membershipService) Join(ctx context.Context, req *rpc.JoinRequest) (*rpc.JoinReply, error) {
	n := s.n
	if leader, ok := s.leaderElsewhere(); ok {
		return forward(ctx, leader, s.dialOpts, func(c rpc.MembershipClient) (*rpc.JoinReply, error) { return c.Join(ctx, req) })
	}
	res, err := n.cluster.Join(ctx, req.Node, req.ClusterId)
	if err != nil {
		return nil, membershipStatus(err)
	}
	n.log.Info().Uint64("node", res.Node.Id).Str("node_addr", res.Node.NodeAddr).Uint64("replaces", res.Node.Replaces).Msg("a node joined the cluster")
	st := n.cluster.State()
	return &rpc.JoinReply{Node: res.Node, ClusterId: st.ID, Partitions: n.cfg.Partitions, Members: st.Members()}, nil
}

func (s membershipService) Observe(ctx context.Context, req *rpc.ObserveConfig) (*rpc.ObserveReply, error) {
	if leader, ok := s.leaderElsewhere(); ok {
		return forward(ctx, leader, s.dialOpts, func(c rpc.MembershipClient) (*rpc.ObserveReply, error) { return c.Observe(ctx, req) })
	}
	if err := s.n.recordObserved(ctx, req.Observed); err != nil {
		return nil, membershipStatus(err)
	}
	return &rpc.ObserveReply{}, nil
}

// recordObserved records a group's configuration in the record (on the
// metadata leader).
func (n *Server) recordObserved(ctx context.Context, obs *rpc.PartitionPlacement) error {
	finishes := finishesMove(n.cluster.State(), obs)
	if err := n.cluster.Observe(ctx, obs); err != nil {
		return err
	}
	if finishes {
		n.cfg.Failpoint.reach("after-record", n.log)
	}
	return nil
}

// finishesMove reports whether recording obs ends a move of its group:
// the configuration the record holds is not the target, obs is.
func finishesMove(st *cluster.State, obs *rpc.PartitionPlacement) bool {
	pl, ok := st.Placement(obs.Partition)
	settled := func(joint bool, voters, learners []uint64) bool {
		return !joint && len(learners) == 0 && len(voters) == len(pl.Replicas) &&
			!slices.ContainsFunc(voters, func(id uint64) bool { return !slices.Contains(pl.Replicas, id) })
	}
	return ok && obs.Partition != 0 && settled(obs.ObservedJoint, obs.ObservedVoters, obs.ObservedLearners) &&
		!settled(pl.ObservedJoint, pl.ObservedVoters, pl.ObservedLearners)
}

func (s membershipService) Remove(ctx context.Context, req *rpc.RemoveRequest) (*rpc.ClusterNode, error) {
	if leader, ok := s.leaderElsewhere(); ok {
		return forward(ctx, leader, s.dialOpts, func(c rpc.MembershipClient) (*rpc.ClusterNode, error) { return c.Remove(ctx, req) })
	}
	n := s.n
	if err := n.meta.ReadIndex(ctx); err != nil { // a new leader reads what its predecessor committed
		return nil, membershipStatus(err)
	}
	st := n.cluster.State()
	node, ok := st.Node(req.Id)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %d: no such node", req.Id)
	}
	switch node.State {
	case rpc.NodeState_NODE_STATE_DRAINING, rpc.NodeState_NODE_STATE_REMOVED:
		return node, nil // already on its way
	case rpc.NodeState_NODE_STATE_JOINING:
		res, err := n.cluster.SetState(ctx, req.Id, node.State, rpc.NodeState_NODE_STATE_REMOVED)
		if err != nil {
			return nil, membershipStatus(err)
		}
		return res.Node, nil
	}
	if !req.Force {
		if reason := n.cannotSpare(st, req.Id); reason != "" {
			return nil, status.Error(codes.FailedPrecondition, reason)
		}
	}
	res, err := n.cluster.SetState(ctx, req.Id, node.State, rpc.NodeState_NODE_STATE_DRAINING)
	if err != nil {
		return nil, membershipStatus(err)
	}
	n.log.Info().Uint64("node", req.Id).Bool("force", req.Force).Msg("draining a node: its replicas leave every group, then it is removed")
	return res.Node, nil
}

// cannotSpare says why the cluster cannot lose node id, or "": the
// remaining active nodes must be at least the replication factor, and
// the live ones a quorum of them.
func (n *Server) cannotSpare(st *cluster.State, id uint64) string {
	var rest, alive int
	for _, m := range st.Members() {
		if m.Id == id || m.State != rpc.NodeState_NODE_STATE_ACTIVE {
			continue
		}
		rest++
		// Live: the metadata group's leader (this node) heard from it
		// lately, which gossip, slower to see a restarted node, may not say.
		if st := n.meta.Status(); st.Active[m.Id] {
			alive++
		}
	}
	switch {
	case rest < n.cfg.Replication:
		return fmt.Sprintf("removing node %d leaves %d active nodes, fewer than the replication factor %d: add a node first (or --force)", id, rest, n.cfg.Replication)
	case alive < rest/2+1:
		return fmt.Sprintf("removing node %d leaves %d live nodes of %d, not a quorum: bring the others back first (or --force)", id, alive, rest)
	}
	return ""
}

// leaderElsewhere names the metadata leader's node address when another
// node leads the metadata group.
func (s membershipService) leaderElsewhere() (string, bool) {
	st := s.n.meta.Status()
	if st.IsLeader || st.Leader == 0 {
		return "", false
	}
	if m, ok := s.n.cluster.State().Node(st.Leader); ok && m.NodeAddr != "" {
		return m.NodeAddr, true
	}
	if a := s.n.cfg.InitialCluster[st.Leader]; a != "" {
		return a, true
	}
	return "", false
}

func forward[R any](ctx context.Context, addr string, dialOpts []grpc.DialOption, call func(rpc.MembershipClient) (R, error)) (R, error) {
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		var zero R
		return zero, status.Errorf(codes.Unavailable, "metadata leader at %s: %v", addr, err)
	}
	defer conn.Close()
	return call(rpc.NewMembershipClient(conn))
}

// membershipStatus maps a cluster command's error to a gRPC status.
func membershipStatus(err error) error {
	var nl *rpc.NotLeaderError
	var groupNL *raftlog.NotLeaderError
	switch {
	case errors.As(err, &nl), errors.As(err, &groupNL), errors.Is(err, rpc.ErrLostLeadership), errors.Is(err, cluster.ErrNoCluster),
		errors.Is(err, context.DeadlineExceeded): // no quorum answered in time
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, rpc.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, cluster.ErrWrongCluster), errors.Is(err, cluster.ErrRemoved), errors.Is(err, cluster.ErrStateConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, rpc.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// startMembership starts the reconciler; stopMembership ends it.
func (n *Server) startMembership(dialOpts []grpc.DialOption) {
	done, ended := make(chan struct{}), make(chan struct{})
	n.stopMembership = func() { close(done); <-ended }
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(ended)
		defer cancel()
		t := time.NewTicker(membershipRound)
		defer t.Stop()
		for {
			changed := n.cluster.Changed()
			if err := n.reconcile(ctx, dialOpts); err != nil {
				n.membershipFailed <- err
				return
			}
			select {
			case <-done:
				return
			case <-changed:
			case <-t.C:
			}
		}
	}()
	go func() {
		<-done
		cancel()
	}()
}

// reconcile is one round of the reconciler; an error stops the node.
func (n *Server) reconcile(ctx context.Context, dialOpts []grpc.DialOption) error {
	st := n.cluster.State()
	if st.ID == nil {
		// A node started on an empty data dir under the id of a node the
		// cluster removed has no record yet; its peers' "removed" answer
		// stops its metadata group.
		if err := n.checkRemoved(st); err != nil {
			return err
		}
		n.createRecord(ctx, dialOpts)
		return nil
	}
	if err := n.applyRecord(st); err != nil {
		return err
	}
	if err := n.followPlacement(st); err != nil {
		return err
	}
	for _, g := range n.localGroups() {
		if pl, ok := st.Placement(uint32(g.ID())); ok && g.ID() != 0 {
			g.SetPreferredLeader(pl.PreferredLeader) // balancing follows placement
		}
		if g.Status().IsLeader {
			n.stepGroup(ctx, st, g)
			n.report(ctx, st, g)
		}
	}
	n.flowShares(ctx, st)
	if n.meta.Status().IsLeader {
		for _, s := range cluster.PlanNodes(st) {
			if _, err := n.cluster.SetState(ctx, s.ID, s.From, s.To); err != nil {
				n.log.Debug().Err(err).Uint64("node", s.ID).Msg("membership: node state change not made; trying again")
				continue
			}
			n.log.Info().Uint64("node", s.ID).Str("from", cluster.StateName(s.From)).Str("to", cluster.StateName(s.To)).Msg("membership: node state changed")
		}
		if plan := cluster.PlanPlacement(st, n.liveness(st), cluster.DefaultMaxMoves); len(plan) > 0 {
			if err := n.cluster.SetPlacements(ctx, plan); err != nil {
				n.log.Debug().Err(err).Msg("placement: not changed; trying again")
			} else {
				for _, pl := range plan {
					n.log.Info().Uint32("partition", pl.Partition).Uints64("replicas", pl.Replicas).Uint64("preferred_leader", pl.PreferredLeader).
						Msg("placement: partition's target replicas changed")
				}
			}
		}
	}
	return nil
}

// followPlacement opens this node's replicas of the partitions placed on
// it, and closes those that left their group's configuration and are not
// placed here any more (the group told it it was removed, or replicaLeft).
func (n *Server) followPlacement(st *cluster.State) error {
	for p := uint32(1); p <= n.cfg.Partitions; p++ {
		g := n.raft.Group(raftlog.GroupID(p))
		if g == nil {
			if placedOn(st, p, n.cfg.NodeID) && n.isActive(st) {
				if err := n.openPartition(p, openBlank); err != nil {
					n.log.Warn().Err(err).Uint32("partition", p).Msg("placement: cannot open this node's replica; trying again")
					continue
				}
				n.log.Info().Uint32("partition", p).Msg("placement: opened a replica placed on this node; it catches up as a learner")
			}
			continue
		}
		removed := false
		select {
		case <-g.Removed():
			removed = true
		default:
		}
		gs := g.Status()
		if removed || replicaLeft(st, p, n.cfg.NodeID, gs.Replica, gs.Applied, g.Membership()) {
			if err := n.closePartition(p); err != nil {
				n.log.Warn().Err(err).Uint32("partition", p).Msg("placement: cannot delete this node's replica that left its group; trying again")
				continue
			}
			n.log.Info().Uint32("partition", p).Msg("placement: deleted this node's replica, which left the partition's configuration")
		}
	}
	return nil
}

// replicaLeft reports whether this node's replica of partition p (replica
// id, applied up to applied, with the configuration m applied) has proof
// that it left the group, or never joined it, and is not this node's to
// keep: not placed here, or placed here in another generation. The proof
// is the replica's own configuration without it; or, blank, none at all
// (a blank replica holds nothing); or the configuration the group's
// leader recorded leaving this node out at an index past all the replica
// applied (a replica id never comes back). The last is how a replica
// removed while its node was down or cut off learns it: the members drop
// the messages of a replica they no longer know.
func replicaLeft(st *cluster.State, p uint32, node, replica, applied uint64, m raftlog.Membership) bool {
	pl, ok := st.Placement(p)
	if !ok {
		return false
	}
	target := slices.Contains(pl.Replicas, node)
	stale := raftlog.GenerationOf(replica) != st.Generation(p, node)
	if target && !stale {
		return false
	}
	blank := len(m.Voters) == 0
	left := !blank && !m.Contains(replica)
	gone := pl.ObservedIndex > applied && !slices.Contains(pl.ObservedVoters, node) && !slices.Contains(pl.ObservedLearners, node)
	return blank || left || gone
}

// isActive reports whether the record says this node is active.
func (n *Server) isActive(st *cluster.State) bool {
	self, ok := st.Node(n.cfg.NodeID)
	return ok && self.State == rpc.NodeState_NODE_STATE_ACTIVE
}

// report records a group's configuration in the record when it differs
// from what the record says (the leader of each group does it).
func (n *Server) report(ctx context.Context, st *cluster.State, g *raftlog.Group) {
	gs := g.Status()
	m := gs.Membership
	obs := &rpc.PartitionPlacement{Partition: uint32(gs.Group), ObservedJoint: m.Joint(), ObservedIndex: gs.Applied}
	for _, r := range m.Voters {
		obs.ObservedVoters = append(obs.ObservedVoters, raftlog.NodeOf(r))
	}
	for _, r := range m.Learners {
		obs.ObservedLearners = append(obs.ObservedLearners, raftlog.NodeOf(r))
	}
	if cur, ok := st.Placement(obs.Partition); ok && cur.ObservedJoint == obs.ObservedJoint &&
		slices.Equal(cur.ObservedVoters, obs.ObservedVoters) && slices.Equal(cur.ObservedLearners, obs.ObservedLearners) {
		return
	}
	if finishesMove(st, obs) {
		n.cfg.Failpoint.reach("before-record", n.log)
	}
	var err error
	if n.meta.Status().IsLeader {
		err = n.recordObserved(ctx, obs)
	} else if addr, ok := (membershipService{n: n}).leaderElsewhere(); ok {
		_, err = forward(ctx, addr, n.dialOpts, func(c rpc.MembershipClient) (*rpc.ObserveReply, error) {
			return c.Observe(ctx, &rpc.ObserveConfig{Observed: obs})
		})
	}
	if err != nil {
		n.log.Debug().Err(err).Uint32("group", obs.Partition).Msg("placement: configuration not recorded yet; trying again")
	}
}

// liveness tells the placement planner which nodes are down (not alive
// in gossip, or a metadata voter this leader has not heard from) and which
// have been down for longer than DeadNodeTimeout: the replicas of those
// are placed elsewhere.
func (n *Server) liveness(st *cluster.State) cluster.Liveness {
	now := time.Now()
	meta := n.meta.Status()
	for _, m := range st.Members() {
		mem, ok := n.members.Node(m.Id)
		heard, voter := meta.Active[m.Id]
		alive := ok && mem.Alive && (!voter || heard) || m.Id == n.cfg.NodeID
		if alive {
			delete(n.downSince, m.Id)
		} else if _, seen := n.downSince[m.Id]; !seen {
			n.downSince[m.Id] = now
		}
	}
	return cluster.Liveness{
		Dead: func(id uint64) bool {
			since, down := n.downSince[id]
			return down && now.Sub(since) > n.cfg.DeadNodeTimeout
		},
		Down: func(id uint64) bool { _, down := n.downSince[id]; return down },
	}
}

// localGroups are this node's replicas: the metadata group, then the
// partitions.
func (n *Server) localGroups() []*raftlog.Group {
	out := []*raftlog.Group{n.meta}
	for p := uint32(1); p <= n.cfg.Partitions; p++ {
		if g := n.raft.Group(raftlog.GroupID(p)); g != nil {
			out = append(out, g)
		}
	}
	return out
}

// createRecord, on the metadata leader, creates the cluster record from
// the voters of the metadata group, once every one of them describes
// itself (the version gate: an earlier release answers UNIMPLEMENTED, and
// would stop on the record's commands).
func (n *Server) createRecord(ctx context.Context, dialOpts []grpc.DialOption) {
	st := n.meta.Status()
	if !st.IsLeader {
		return
	}
	var nodes []*rpc.ClusterNode
	for _, id := range st.Voters {
		if id == n.cfg.NodeID {
			nodes = append(nodes, n.selfDescription())
			continue
		}
		addr := n.cfg.InitialCluster[id]
		d, err := describe(ctx, addr, dialOpts)
		if err != nil {
			ev := n.log.Debug()
			if status.Code(err) == codes.Unimplemented {
				ev = n.log.Warn()
			}
			ev.Err(err).Uint64("node", id).Msg("membership: waiting for every node to run a release with cluster membership before creating the cluster record")
			return
		}
		d.Node.Id, d.Node.NodeAddr = id, addr // as the others dial it
		nodes = append(nodes, d.Node)
	}
	var placements []*rpc.PartitionPlacement
	for p := uint32(1); p <= n.cfg.Partitions; p++ {
		placements = append(placements, &rpc.PartitionPlacement{Partition: p, Replicas: slices.Clone(st.Voters)})
	}
	res, err := n.cluster.InitWith(ctx, cluster.NewClusterID(), nodes, uint32(n.cfg.Replication), placements)
	if err != nil {
		n.log.Debug().Err(err).Msg("membership: cluster record not created yet; trying again")
		return
	}
	if err := n.raft.RaiseFormat(); err != nil { // applyRecord tries again
		n.log.Warn().Err(err).Msg("membership: data dir format not raised")
	}
	n.log.Info().Str("cluster", hex.EncodeToString(res.ClusterID)).Uints64("nodes", st.Voters).
		Msg("membership: created the cluster record from the nodes of --initial-cluster; from now on nodes join with `raftgate server --join` and leave with `raftgate nodes remove`")
}

func describe(ctx context.Context, addr string, dialOpts []grpc.DialOption) (*rpc.DescribeReply, error) {
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return rpc.NewMembershipClient(conn).Describe(cctx, &rpc.DescribeRequest{})
}

// applyRecord makes this node follow the record: its peers, its identity
// file, and its own removal.
func (n *Server) applyRecord(st *cluster.State) error {
	if st.Index == n.appliedRecord {
		return n.checkRemoved(st)
	}
	if err := n.raft.RaiseFormat(); err != nil { // an earlier release refuses this data dir from now on
		return err
	}
	peers := map[uint64]string{}
	var ids []uint64
	for _, m := range st.Nodes {
		if m.State == rpc.NodeState_NODE_STATE_REMOVED {
			n.raft.RemovePeer(m.Id)
			continue
		}
		peers[m.Id] = m.NodeAddr
		ids = append(ids, m.Id)
		if err := n.raft.SetPeer(m.Id, m.NodeAddr); err != nil {
			return err
		}
	}
	if _, ok := peers[n.cfg.NodeID]; ok {
		peers[n.cfg.NodeID] = n.cfg.NodeAddr
		if err := n.dispatchClient.SetPeers(peers); err != nil {
			return err
		}
		n.members.SetVoters(ids)
	}
	if err := n.saveIdentity(st); err != nil {
		return err
	}
	n.appliedRecord = st.Index
	return n.checkRemoved(st)
}

// saveIdentity writes the identity file of a first node the first time
// the record names it, and refuses a data dir of another cluster.
func (n *Server) saveIdentity(st *cluster.State) error {
	self, ok := st.Node(n.cfg.NodeID)
	if !ok {
		return nil
	}
	id, have, err := cluster.LoadIdentity(n.cfg.DataDir)
	if err != nil {
		return err
	}
	cid := hex.EncodeToString(st.ID)
	if have && id.ClusterID != "" && id.ClusterID != cid {
		return fmt.Errorf("--data-dir %s belongs to cluster %s, but this cluster is %s: start it among its own cluster's nodes", n.cfg.DataDir, id.ClusterID, cid)
	}
	if have && id.Complete() {
		return nil
	}
	id.ClusterID, id.NodeID = cid, self.Id
	if err := cluster.SaveIdentity(n.cfg.DataDir, id); err != nil {
		return err
	}
	n.log.Info().Str("cluster", cid).Uint64("node", self.Id).Str("file", cluster.IdentityFile).Msg("membership: wrote this node's identity")
	return nil
}

// checkRemoved stops a node the record says is removed, or whose replicas
// the groups removed while it drains.
func (n *Server) checkRemoved(st *cluster.State) error {
	self, ok := st.Node(n.cfg.NodeID)
	removed := ok && self.State == rpc.NodeState_NODE_STATE_REMOVED
	// A node that applied its own removal from the metadata group (a
	// restart on a removed node's data dir) is in none of its
	// configurations; a joiner's blank replica has none yet.
	if m := n.meta.Membership(); len(m.Voters) > 0 && m.Replica(n.cfg.NodeID) == 0 {
		removed = true
	}
	if !removed {
		select {
		case <-n.meta.Removed():
			removed = true
		default:
		}
	}
	if !removed {
		return nil
	}
	n.log.Error().Msg("stopping: this node was removed from the cluster (raftgate nodes remove); it cannot come back: delete its data dir, and add a machine with `raftgate server --join`")
	return ErrRemovedNode
}

// stepGroup takes the next configuration step of a group this node leads.
func (n *Server) stepGroup(ctx context.Context, st *cluster.State, g *raftlog.Group) {
	m := g.Membership()
	step := cluster.PlanGroup(st, uint32(g.Status().Group), m)
	if step.Kind == cluster.StepNone {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, confStepTimeout)
	defer cancel()
	// This node's replica of the record may lag the metadata leader's (a
	// target changed again since): plan the step again from a record that
	// holds everything committed, so no step serves a superseded target.
	if err := n.meta.CatchUp(ctx); err != nil {
		n.log.Debug().Err(err).Uint32("group", uint32(g.Status().Group)).Msg("membership: record not caught up; the next round tries again")
		return
	}
	st = n.cluster.State()
	if step = cluster.PlanGroup(st, uint32(g.Status().Group), m); step.Kind == cluster.StepNone {
		return
	}
	var err error
	switch step.Kind {
	case cluster.StepAddLearner:
		_, err = g.AddLearner(ctx, m, step.Replica)
	case cluster.StepPromote:
		_, err = g.Promote(ctx, m, step.Replica, 0)
	case cluster.StepLeaveJoint:
		_, err = g.LeaveJoint(ctx, m)
	case cluster.StepRemove:
		waitOn, wait := removalWaits(g.Status(), m, step.Replica)
		if silent := m.Replica(waitOn); wait && !cluster.WantedReplica(st, uint32(g.Status().Group), silent) {
			// The silent voter goes too: remove it first (a removal of
			// a voter not heard from never waits).
			step.Replica, wait = silent, false
		}
		if wait {
			n.log.Debug().Uint32("group", uint32(g.Status().Group)).Uint64("node", raftlog.NodeOf(step.Replica)).Uint64("waiting_on", waitOn).
				Msg("membership: not removing a live voter while another voter is not heard from")
			return
		}
		_, err = g.RemoveReplica(ctx, m, step.Replica)
	}
	ev := n.log.Info()
	if err != nil {
		ev = n.log.Debug().Err(err) // not caught up yet, leadership moved: the next round tries again
	}
	ev.Uint32("group", uint32(g.Status().Group)).Str("step", step.Kind.String()).Uint64("node", raftlog.NodeOf(step.Replica)).
		Msg("membership: configuration change")
}

// removalWaits reports whether removing replica from the group, whose
// leader's status is gs, must wait, and on which node: a voter this leader
// hears from is never removed while another voter is not heard from, so a
// move whose new replica went down cannot leave its partition on fewer
// live voters than it had. Removing a voter that is itself down (a
// repair) never waits: it lowers the quorum the live ones must make.
func removalWaits(gs raftlog.Status, m raftlog.Membership, replica uint64) (uint64, bool) {
	if !slices.Contains(m.Voters, replica) || !gs.Active[raftlog.NodeOf(replica)] {
		return 0, false
	}
	for _, r := range m.Voters {
		if node := raftlog.NodeOf(r); r != replica && !gs.Active[node] {
			return node, true
		}
	}
	return 0, false
}

// isEmptyDataDir reports whether dir has nothing but its lock and what a
// join writes before the data dir is opened.
func isEmptyDataDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	for _, e := range entries {
		if e.Name() != cluster.IdentityFile && e.Name() != raftlog.LockFile {
			return false
		}
	}
	return true
}
