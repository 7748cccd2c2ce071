package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

func newStatusCmd(env cliEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show the cluster: nodes, partitions, leaders and replication lag",
		Args:  cobra.NoArgs,
	}
	client := addAdminFlags(cmd)
	var stuckAfter time.Duration
	cmd.Flags().DurationVar(&stuckAfter, "stuck-after", 0,
		"also read GET /placement twice this long apart and fail when a move in flight made no progress between them (0: skip)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var view admin.ClusterView
		c := client()
		if err := c.do(cmd.Context(), "GET", "/cluster", nil, &view); err != nil {
			return err
		}
		unseen := fillFromLeaders(cmd.Context(), c, &view)
		fillVersions(cmd.Context(), c, &view)
		if err := printCluster(env.stdout, view); err != nil {
			return err
		}
		if stuckAfter > 0 {
			stuck, err := stuckMoves(cmd.Context(), c, stuckAfter)
			if err != nil {
				return err
			}
			unseen = append(unseen, stuck...)
		}
		if len(unseen) == 0 {
			return nil
		}
		// The table is incomplete or a move is stuck: say why, and fail,
		// so that neither a person nor a script takes the "-" for
		// "nothing to show".
		for _, u := range unseen {
			fmt.Fprintf(env.stderr, "raftgate: %s\n", u)
		}
		return errSilent
	}
	return cmd
}

// fillFromLeaders completes the partitions the queried node does not lead:
// only a leader knows its replicas' progress and its outbox, so each
// leader's admin API (its address from the node list) is asked once. It
// returns, per leader that could not be asked, why its partitions stay "-".
func fillFromLeaders(ctx context.Context, c *adminClient, v *admin.ClusterView) []string {
	adminOf := map[uint64]string{}
	for _, n := range v.Nodes {
		if n.Alive && n.AdminAddr != "" {
			adminOf[n.ID] = n.AdminAddr
		}
	}
	asked := map[uint64]map[uint32]admin.PartitionStatus{}
	var unseen []string
	for i := range v.Partitions {
		p := &v.Partitions[i]
		if p.Leader == 0 || len(p.Replicas) > 0 {
			continue
		}
		byID, ok := asked[p.Leader]
		if !ok {
			var err error
			byID, err = leaderPartitions(ctx, c, p.Leader, adminOf[p.Leader])
			if err != nil {
				unseen = append(unseen, fmt.Sprintf("node %d leads partitions whose replicas and outbox are not shown: %v", p.Leader, err))
			}
			asked[p.Leader] = byID
		}
		if lp, ok := byID[p.ID]; ok && lp.Leader == p.Leader && lp.Term == p.Term {
			p.Replicas, p.OutboxDepth = lp.Replicas, lp.OutboxDepth
		}
	}
	return unseen
}

// leaderPartitions asks leader's admin API (at addr, "" when gossip does
// not show it alive) for its partitions.
func leaderPartitions(ctx context.Context, c *adminClient, leader uint64, addr string) (map[uint32]admin.PartitionStatus, error) {
	if addr == "" {
		return nil, errors.New("it is not an alive gossip member, so its admin API is unknown")
	}
	var lv admin.ClusterView
	other := *c
	other.base = normalizeBaseURL(addr)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := other.do(ctx, "GET", "/cluster", nil, &lv); err != nil {
		if isStatus(err, http.StatusUnauthorized) {
			return nil, fmt.Errorf("its admin API at %s refused (%v); give its token with --admin-token", other.base, err)
		}
		return nil, err
	}
	byID := map[uint32]admin.PartitionStatus{}
	for _, lp := range lv.Partitions {
		byID[lp.ID] = lp
	}
	return byID, nil
}

// fillVersions asks every live node's admin API for its build version, so
// that a rolling upgrade can be followed; a node that does not answer
// shows "?".
func fillVersions(ctx context.Context, c *adminClient, v *admin.ClusterView) {
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if !n.Alive || n.AdminAddr == "" {
			continue
		}
		other := *c
		other.base = normalizeBaseURL(n.AdminAddr)
		var b admin.BuildInfo
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := other.do(ctx, "GET", "/version", nil, &b); err == nil && b.Version != "" {
			n.Version = b.Version
			if b.Commit != "" {
				n.Version += " (" + shortCommit(b.Commit) + ")"
			}
		} else {
			n.Version = "?"
		}
		cancel()
	}
}

// shortCommit keeps a commit hash readable in a table (12 hex digits, and
// the -dirty mark).
func shortCommit(c string) string {
	hash, dirty, _ := strings.Cut(c, "-")
	if len(hash) > 12 {
		hash = hash[:12]
	}
	if dirty != "" {
		return hash + "-" + dirty
	}
	return hash
}

// printCluster writes the operator table of a cluster view.
func printCluster(out io.Writer, v admin.ClusterView) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	silent := silentNodes(v.Partitions)
	fmt.Fprintf(tw, "NODE\tALIVE\tINGRESS\tADMIN\tNODE ADDR\tGOSSIP\tVERSION\n")
	for _, n := range v.Nodes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, aliveText(n.Alive, silent[n.ID]),
			dash(n.IngressAddr), dash(n.AdminAddr), dash(n.NodeAddr), dash(n.GossipAddr), dash(n.Version))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	alive := map[uint64]bool{}
	for _, n := range v.Nodes {
		alive[n.ID] = n.Alive
	}
	ready := "ready"
	if !v.Ready {
		ready = "NOT READY: a partition has no known leader"
	}
	fmt.Fprintf(out, "\n%d partitions, %s\n", countPartitions(v.Partitions), ready)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "PARTITION\tKEY RANGE\tLEADER\tTERM\tAPPLIED\tOUTBOX\tREPLICAS (node:match/lag, down: not heard from)\n")
	for _, p := range v.Partitions {
		keys := fmt.Sprintf("%016x-%016x", p.FirstKey, p.LastKey)
		if p.ID == 0 {
			keys = "metadata"
		}
		leader := "none"
		if p.Leader != 0 {
			leader = fmt.Sprint(p.Leader)
		}
		outbox := "-"
		if p.OutboxDepth != nil {
			outbox = fmt.Sprint(*p.OutboxDepth)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", p.ID, keys, leader, p.Term, p.AppliedIndex, outbox, replicaText(p.Replicas, alive))
	}
	return tw.Flush()
}

// replicaText shows each replica as node:match/lag. A replica its leader
// has not heard from lately, or on a node gossip shows dead, is shown down
// with its last known match and no lag: a stopped node's match stays put
// while nothing is written, which would read as caught up.
func replicaText(rs []admin.ReplicaStatus, alive map[uint64]bool) string {
	if len(rs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		if r.Down || r.Lag == nil || !alive[r.NodeID] {
			parts = append(parts, fmt.Sprintf("%d:down(match %d, lag unknown)", r.NodeID, r.Match))
			continue
		}
		s := fmt.Sprintf("%d:%d/%d", r.NodeID, r.Match, *r.Lag)
		if r.State != "" && r.State != "replicate" {
			s += "(" + r.State + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// silentNodes are the nodes some partition's leader reports down.
func silentNodes(ps []admin.PartitionStatus) map[uint64]bool {
	out := map[uint64]bool{}
	for _, p := range ps {
		for _, r := range p.Replicas {
			if r.Down {
				out[r.NodeID] = true
			}
		}
	}
	return out
}

// aliveText is the ALIVE column: gossip's verdict, "suspect" while gossip
// still lists a node that a partition leader no longer hears from (gossip
// takes seconds longer to declare it dead; docs/operations.md).
func aliveText(alive, silent bool) string {
	switch {
	case !alive:
		return "NO"
	case silent:
		return "suspect"
	}
	return "yes"
}

func countPartitions(ps []admin.PartitionStatus) int {
	n := 0
	for _, p := range ps {
		if p.ID != 0 {
			n++
		}
	}
	return n
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
