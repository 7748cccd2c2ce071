package main

import (
	"context"
	"fmt"
	"io"
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
		fillFromLeaders(cmd.Context(), c, &view)
		return printCluster(env.stdout, view)
	}
	return cmd
}

// fillFromLeaders completes the partitions the queried node does not lead:
// only a leader knows its replicas' progress and its outbox, so each
// leader's admin API (its address from the node list) is asked once. A
// leader that cannot be reached leaves its partitions as they were ("-").
func fillFromLeaders(ctx context.Context, c *adminClient, v *admin.ClusterView) {
	adminOf := map[uint64]string{}
	for _, n := range v.Nodes {
		if n.Alive && n.AdminAddr != "" {
			adminOf[n.ID] = n.AdminAddr
		}
	}
	asked := map[uint64]map[uint32]admin.PartitionStatus{}
	for i := range v.Partitions {
		p := &v.Partitions[i]
		if p.Leader == 0 || len(p.Replicas) > 0 || adminOf[p.Leader] == "" {
			continue
		}
		byID, ok := asked[p.Leader]
		if !ok {
			var lv admin.ClusterView
			other := *c
			other.base = normalizeBaseURL(adminOf[p.Leader])
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if other.do(ctx, "GET", "/cluster", nil, &lv) == nil {
				byID = map[uint32]admin.PartitionStatus{}
				for _, lp := range lv.Partitions {
					byID[lp.ID] = lp
				}
			}
			cancel()
			asked[p.Leader] = byID
		}
		if lp, ok := byID[p.ID]; ok && lp.Leader == p.Leader && lp.Term == p.Term {
			p.Replicas, p.OutboxDepth = lp.Replicas, lp.OutboxDepth
		}
	}
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", p.ID, keys, leader, p.Term, p.AppliedIndex, outbox, replicaText(p.Replicas))
	}
	return tw.Flush()
}

func replicaText(rs []admin.ReplicaStatus) string {
	if len(rs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
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
