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

// removalPollInterval is how often `nodes remove --wait` asks for the
// node's state.
const removalPollInterval = time.Second

func newNodesCmd(env cliEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "list the cluster's nodes and remove one (list, remove ID)",
	}
	client := addAdminFlags(cmd)

	var asJSON bool
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "list every node the cluster gave an id, removed ones included, with its state and roles",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var nodes []admin.NodeView
			if err := client().do(cmd.Context(), "GET", "/nodes", nil, &nodes); err != nil {
				return fmt.Errorf("list nodes: %w", err)
			}
			if asJSON {
				return printJSON(env.stdout, nodes)
			}
			return printNodes(env.stdout, nodes)
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the admin API's JSON answer")

	var force, wait bool
	var timeout time.Duration
	remove := &cobra.Command{
		Use:     "remove ID",
		Aliases: []string{"rm"},
		Short:   "drain a node and remove it from the cluster; its process then stops by itself",
		Long: `remove drains node ID (its leaderships are handed off and its replicas
removed) and marks it removed; the removed node's process stops by itself
and can never rejoin with its data directory. The cluster refuses, saying
why, a removal that would leave fewer than a quorum of live voters or fewer
replicas than the configured replication; --force skips those checks.`,
		Example: `  raftgate nodes remove 4 --wait
  raftgate nodes remove 4 --force    # node 4 is dead for good and the cluster refuses`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return fmt.Errorf("malformed node id %q: want a number such as 4 (raftgate nodes list shows the ids)", args[0])
			}
			path := "/nodes/" + strconv.FormatUint(id, 10)
			if force {
				path += "?force=1"
			}
			c := client()
			// The node asked may be the one removed, which stops: --wait
			// learns the other members' admin APIs before it does.
			bases := []string{c.base}
			if wait {
				var nodes []admin.NodeView
				if err := c.do(cmd.Context(), "GET", "/nodes", nil, &nodes); err != nil {
					return fmt.Errorf("remove node %d: %w", id, err)
				}
				bases = askable(c.base, id, nodes)
			}
			var v admin.NodeView
			if err := c.do(cmd.Context(), "DELETE", path, nil, &v); err != nil {
				return removeError(id, force, err)
			}
			if v.State == "removed" { // nothing to drain
				fmt.Fprintf(env.stdout, "node %d is removed; its process stops by itself\n", id)
				return nil
			}
			if !wait {
				fmt.Fprintf(env.stdout, "node %d is %s: it drains, then is removed and its process stops (follow with: raftgate nodes list)\n", id, v.State)
				return nil
			}
			fmt.Fprintf(env.stdout, "node %d: %s\n", id, v.State)
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return waitRemoved(ctx, c, bases, v, env)
		},
	}
	remove.Flags().BoolVar(&force, "force", false, "skip the safety checks (quorum of live voters, replication); only for a node that is gone for good")
	remove.Flags().BoolVar(&wait, "wait", false, "wait until the node is removed, printing each state it passes through")
	remove.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait: give up waiting after this long (the removal goes on)")
	cmd.AddCommand(list, remove)
	return cmd
}

// removeError says what a refused removal means to the operator.
func removeError(id uint64, forced bool, err error) error {
	var e *apiError
	switch {
	case !errors.As(err, &e):
		return fmt.Errorf("remove node %d: %w", id, err)
	case e.Status == http.StatusConflict && !forced:
		return fmt.Errorf("node %d was not removed: %s (--force removes it anyway, skipping this check)", id, e.Message)
	case e.Status == http.StatusConflict:
		return fmt.Errorf("node %d was not removed: %s", id, e.Message)
	case e.Status == http.StatusNotFound:
		return fmt.Errorf("node %d is not a node of this cluster (raftgate nodes list shows them)", id)
	}
	return fmt.Errorf("remove node %d: %w", id, err)
}

// waitRemoved polls GET /nodes until node v.ID is removed or ctx ends,
// printing each state change. When the admin API at bases[0] does not
// answer, the others (members' admin APIs, renewed from each list) are
// asked in turn.
func waitRemoved(ctx context.Context, c *adminClient, bases []string, v admin.NodeView, env cliEnv) error {
	id, state := v.ID, v.State
	var lastErr error
	failed := 0 // members that failed to answer since the last pause
	for state != "removed" {
		var nodes []admin.NodeView
		ask := *c
		ask.base = bases[0]
		err := ask.do(ctx, "GET", "/nodes", nil, &nodes)
		switch {
		case ctx.Err() != nil:
			msg := fmt.Sprintf("node %d is still %s; the removal goes on (follow with: raftgate nodes list)", id, state)
			if lastErr != nil {
				msg += fmt.Sprintf("; last error: %v", lastErr)
			}
			return fmt.Errorf("gave up waiting: %s", msg)
		case err != nil:
			if lastErr == nil || err.Error() != lastErr.Error() {
				fmt.Fprintf(env.stderr, "raftgate: %v\n", err)
			}
			lastErr = err
			bases = append(bases[1:], bases[0])
			if failed++; failed < len(bases) {
				continue // ask the next member now
			}
		default:
			lastErr = nil
			i := slices.IndexFunc(nodes, func(n admin.NodeView) bool { return n.ID == id })
			if i < 0 {
				return fmt.Errorf("node %d is no longer in the node table of %s", id, ask.base)
			}
			if nodes[i].State != state {
				state = nodes[i].State
				fmt.Fprintf(env.stdout, "node %d: %s\n", id, state)
			}
			bases = askable(ask.base, id, nodes)
		}
		if state == "removed" {
			break
		}
		failed = 0
		select {
		case <-ctx.Done():
		case <-time.After(removalPollInterval):
		}
	}
	fmt.Fprintf(env.stdout, "node %d is removed; its process stops by itself\n", id)
	return nil
}

// askable lists the admin APIs to poll: first the one that answered, then
// those of the other live members but the node being removed.
func askable(answered string, removing uint64, nodes []admin.NodeView) []string {
	out := []string{answered}
	for _, n := range nodes {
		if n.ID == removing || !n.Alive || n.Admin == "" || n.State == "removed" {
			continue
		}
		if b := normalizeBaseURL(n.Admin); b != answered {
			out = append(out, b)
		}
	}
	return out
}

// printNodes writes the node table.
func printNodes(out io.Writer, nodes []admin.NodeView) error {
	if len(nodes) == 0 {
		fmt.Fprintln(out, "no nodes in the node table")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tSTATE\tZONE\tALIVE\tVERSION\tNODE ADDR\tINGRESS\tADMIN\tMETADATA\tPARTITIONS\n")
	for _, n := range nodes {
		alive := "NO"
		if n.Alive {
			alive = "yes"
		}
		meta, parts := roleText(n.Groups)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.State, dash(n.Zone), alive, dash(n.Version),
			dash(n.NodeAddr), dash(n.Ingress), dash(n.Admin), meta, parts)
	}
	return tw.Flush()
}

// roleText is a node's role in the metadata group and its partition roles
// counted, like "voter×3 learner×0" (incoming, outgoing and any other role
// only when the node has one); "-" when it is in none.
func roleText(groups []admin.GroupRole) (meta, parts string) {
	meta, parts = "-", "-"
	counts := map[string]int{"voter": 0, "learner": 0}
	order := []string{"voter", "learner", "incoming", "outgoing"}
	for _, g := range groups {
		if g.Group == 0 {
			meta = g.Role
			continue
		}
		if !slices.Contains(order, g.Role) {
			order = append(order, g.Role)
		}
		counts[g.Role]++
	}
	if len(groups) == 0 || len(groups) == 1 && meta != "-" {
		return meta, parts
	}
	var b []string
	for _, role := range order {
		if n, ok := counts[role]; ok {
			b = append(b, fmt.Sprintf("%s×%d", role, n))
		}
	}
	return meta, strings.Join(b, " ")
}
