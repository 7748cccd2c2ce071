package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

func newPlacementCmd(env cliEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "placement",
		Short: "show where partitions' replicas are, and move them (show, pause, resume, move, set-replication)",
	}
	client := addAdminFlags(cmd)

	var asJSON bool
	show := &cobra.Command{
		Use:   "show",
		Short: "show each partition's replicas with their roles, its preferred and current leader, and moves in flight",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var v admin.PlacementView
			if err := client().do(cmd.Context(), "GET", "/placement", nil, &v); err != nil {
				return fmt.Errorf("show placement: %w", err)
			}
			if asJSON {
				return printJSON(env.stdout, v)
			}
			return printPlacement(env.stdout, v)
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print the admin API's JSON answer")

	pause := &cobra.Command{
		Use:   "pause",
		Short: "stop rebalancing: no new move starts (moves in flight finish, and lost replicas are still repaired)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := client().do(cmd.Context(), "POST", "/placement/pause", nil, nil); err != nil {
				return fmt.Errorf("pause rebalancing: %w", err)
			}
			fmt.Fprintln(env.stdout, "rebalancing paused: no new move starts; lost replicas are still repaired (undo with: raftgate placement resume)")
			return nil
		},
	}
	resume := &cobra.Command{
		Use:   "resume",
		Short: "resume rebalancing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := client().do(cmd.Context(), "POST", "/placement/resume", nil, nil); err != nil {
				return fmt.Errorf("resume rebalancing: %w", err)
			}
			fmt.Fprintln(env.stdout, "rebalancing resumed")
			return nil
		},
	}

	var from, to uint64
	move := &cobra.Command{
		Use:   "move P --from A --to B",
		Short: "move partition P's replica on node A to node B",
		Long: `move asks the cluster to move partition P's replica from node A to node B:
B's new replica is added as a learner, catches up, becomes a voter in A's
place, and A's replica is removed. The command returns once the move is
asked; raftgate placement show follows it. The cluster refuses, saying why,
a move that would leave the partition without a quorum of live voters or
that breaks its placement rules.`,
		Example: `  raftgate placement move 3 --from 2 --to 5`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil || p == 0 {
				return fmt.Errorf("malformed partition %q: want a number such as 3 (raftgate placement show lists them)", args[0])
			}
			if from == 0 || to == 0 {
				return errors.New("move needs --from and --to, the node ids the replica leaves and goes to (raftgate nodes list shows them)")
			}
			path := fmt.Sprintf("/placement/partitions/%d/move", p)
			err = client().do(cmd.Context(), "POST", path, admin.MoveRequest{From: from, To: to}, nil)
			var e *apiError
			switch {
			case errors.As(err, &e) && e.Status == http.StatusConflict:
				return fmt.Errorf("partition %d was not moved: %s", p, e.Message)
			case err != nil:
				return fmt.Errorf("move partition %d: %w", p, err)
			}
			fmt.Fprintf(env.stdout, "partition %d: moving its replica from node %d to node %d (follow with: raftgate placement show)\n", p, from, to)
			return nil
		},
	}
	move.Flags().Uint64Var(&from, "from", 0, "the node whose replica leaves")
	move.Flags().Uint64Var(&to, "to", 0, "the node the replica goes to")

	setReplication := &cobra.Command{
		Use:     "set-replication R",
		Short:   "set the replicas per partition to R; partitions then move toward R voters each",
		Example: `  raftgate placement set-replication 5`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := strconv.Atoi(args[0])
			if err != nil || r < 1 {
				return fmt.Errorf("malformed replication %q: want a number of replicas such as 3", args[0])
			}
			if err := client().do(cmd.Context(), "PUT", "/placement/replication", admin.ReplicationRequest{Replication: r}, nil); err != nil {
				return fmt.Errorf("set replication to %d: %w", r, err)
			}
			fmt.Fprintf(env.stdout, "replication set to %d: partitions move toward %d replicas each (follow with: raftgate placement show)\n", r, r)
			return nil
		},
	}
	cmd.AddCommand(show, pause, resume, move, setReplication)
	return cmd
}

// printPlacement writes the placement table.
func printPlacement(out io.Writer, v admin.PlacementView) error {
	state := "rebalancing on"
	if v.Paused {
		state = "rebalancing PAUSED (raftgate placement resume)"
	}
	fmt.Fprintf(out, "replication %d, %s\n\n", v.Replication, state)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "PARTITION\tREPLICAS (node:role)\tPREFERRED\tLEADER\tVERSION\tMOVE\n")
	for _, p := range v.Partitions {
		leader := "none"
		if p.Leader != 0 {
			leader = strconv.FormatUint(p.Leader, 10)
		}
		preferred := "-"
		if p.PreferredLeader != 0 {
			preferred = strconv.FormatUint(p.PreferredLeader, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", p.ID, replicaRoles(p.Replicas), preferred, leader, p.Version, moveText(p.Move))
	}
	return tw.Flush()
}

// replicaRoles shows replicas as "1:voter 4:incoming", "-" when none.
func replicaRoles(rs []admin.ReplicaRole) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprintf("%d:%s", r.Node, r.Role)
	}
	return dash(strings.Join(s, " "))
}

// moveText is a move in flight as "3 → 4" (nodes leaving → coming), "-"
// when none.
func moveText(m *admin.MoveView) string {
	if m == nil {
		return "-"
	}
	ids := func(ns []uint64) string {
		if len(ns) == 0 {
			return "-"
		}
		s := make([]string, len(ns))
		for i, n := range ns {
			s[i] = strconv.FormatUint(n, 10)
		}
		return strings.Join(s, ",")
	}
	return ids(m.From) + " → " + ids(m.To)
}

// stuckMoves reads GET /placement twice, after apart, and describes each
// move in flight in both reads that made no progress between them: the
// same move, the same replicas in the same roles and the same target
// version. A move progresses by configuration changes (learner added,
// joint entered and left, replica removed), so apart must be longer than
// a learner takes to catch up.
func stuckMoves(ctx context.Context, c *adminClient, apart time.Duration) ([]string, error) {
	var before, after admin.PlacementView
	if err := c.do(ctx, "GET", "/placement", nil, &before); err != nil {
		return nil, fmt.Errorf("--stuck-after: read placement: %w", err)
	}
	if !slices.ContainsFunc(before.Partitions, func(p admin.PartitionPlacement) bool { return p.Move != nil }) {
		return nil, nil // nothing in flight, nothing to wait for
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(apart):
	}
	if err := c.do(ctx, "GET", "/placement", nil, &after); err != nil {
		return nil, fmt.Errorf("--stuck-after: read placement again: %w", err)
	}
	was := map[uint32]admin.PartitionPlacement{}
	for _, p := range before.Partitions {
		was[p.ID] = p
	}
	var stuck []string
	for _, p := range after.Partitions {
		b, ok := was[p.ID]
		if !ok || b.Move == nil || b.Version != p.Version ||
			moveText(b.Move) != moveText(p.Move) || !slices.Equal(b.Replicas, p.Replicas) {
			continue
		}
		leader := "no leader"
		if p.Leader != 0 {
			leader = fmt.Sprintf("leader %d", p.Leader)
		}
		stuck = append(stuck, fmt.Sprintf("partition %d: move %s made no progress in %v (replicas %s, %s, version %d)",
			p.ID, moveText(p.Move), apart, replicaRoles(p.Replicas), leader, p.Version))
	}
	return stuck, nil
}
