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
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var view admin.ClusterView
		c := client()
		if err := c.do(cmd.Context(), "GET", "/cluster", nil, &view); err != nil {
			return err
		}
		unseen := fillFromLeaders(cmd.Context(), c, &view)
		if err := printCluster(env.stdout, view); err != nil {
			return err
		}
		if len(unseen) == 0 {
			return nil
		}
		// The table is incomplete: say why, and fail, so that neither a
		// person nor a script takes the "-" for "nothing to show".
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

// printCluster writes the operator table of a cluster view.
func printCluster(out io.Writer, v admin.ClusterView) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tALIVE\tINGRESS\tADMIN\tNODE ADDR\tGOSSIP\n")
	for _, n := range v.Nodes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", n.ID, yesNo(n.Alive),
			dash(n.IngressAddr), dash(n.AdminAddr), dash(n.NodeAddr), dash(n.GossipAddr))
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
	fmt.Fprintf(tw, "PARTITION\tKEY RANGE\tLEADER\tTERM\tAPPLIED\tOUTBOX\tREPLICAS (node:match/lag)\n")
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

// replicaText shows each replica as node:match/lag. A replica on a node
// that gossip does not show alive is shown unreachable: a leader's lag for
// a stopped node stays 0 while nothing is written, which reads as caught up.
func replicaText(rs []admin.ReplicaStatus, alive map[uint64]bool) string {
	if len(rs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		if !alive[r.NodeID] {
			parts = append(parts, fmt.Sprintf("%d:unreachable(match %d)", r.NodeID, r.Match))
			continue
		}
		s := fmt.Sprintf("%d:%d/%d", r.NodeID, r.Match, r.Lag)
		if r.State != "" && r.State != "replicate" {
			s += "(" + r.State + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
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

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
