package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/raftgate/raftgate/rpc"
)

// Nodes is the cluster's node table (package cluster's record), for GET /nodes and DELETE /nodes/{id}.
// Called from HTTP handler goroutines, concurrently; errors are rpc
// errors as for Invocations, and calls honour ctx.
type Nodes interface {
	// Nodes lists every node ever given an id, removed ones included, by id.
	Nodes(ctx context.Context) ([]NodeView, error)
	// RemoveNode starts draining node id (it is removed once it holds no replica); force skips the safety checks.
	// It returns rpc.ErrNotFound for an id the cluster never gave, and a
	// *RefusedError for a removal the cluster cannot spare.
	RemoveNode(ctx context.Context, id uint64, force bool) (NodeView, error)
}

// NodeView is one node of the node table: the JSON form of GET /nodes.
type NodeView struct {
	ID       uint64      `json:"id"`
	State    string      `json:"state"` // joining, active, draining, removed
	NodeAddr string      `json:"nodeAddr"`
	Ingress  string      `json:"ingress"`
	Admin    string      `json:"admin"`
	Zone     string      `json:"zone"`
	Alive    bool        `json:"alive"`
	Version  string      `json:"version"` // "" when unknown (node unreachable)
	Groups   []GroupRole `json:"groups"`  // the node's role in each group it is in
}

// GroupRole is a node's role in one Raft group.
type GroupRole struct {
	Group uint32 `json:"group"` // 0 is the metadata group, 1..P the partitions
	Role  string `json:"role"`  // voter, learner, incoming, outgoing
}

// RefusedError is a removal the cluster cannot spare; Reason says why (409).
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "removal refused: " + e.Reason }

// noNodes is the answer of the node routes when the wiring gives no Nodes.
const noNodes = "this node does not serve the node table (GET /nodes, DELETE /nodes/{id}): it runs without cluster membership"

func (s *server) listNodes(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Nodes == nil {
		s.writeError(w, r, http.StatusNotImplemented, noNodes)
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	nodes, err := s.cfg.Nodes.Nodes(ctx)
	if err != nil {
		s.writeCallError(w, r, "list nodes", err)
		return
	}
	if nodes == nil {
		nodes = []NodeView{}
	}
	for i := range nodes {
		nodes[i] = withGroups(nodes[i])
	}
	writeJSON(w, http.StatusOK, nodes)
}

// removeNode starts a node's removal: 202, as the drain goes on after the
// answer (GET /nodes shows it draining, then removed).
func (s *server) removeNode(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Nodes == nil {
		s.writeError(w, r, http.StatusNotImplemented, noNodes)
		return
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("malformed node id %q: want a node id such as 4 (see GET /nodes)", r.PathValue("id")))
		return
	}
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		if force, err = strconv.ParseBool(v); err != nil {
			s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("malformed force=%q: want force=1 or none", v))
			return
		}
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	v, err := s.cfg.Nodes.RemoveNode(ctx, id, force)
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		s.writeError(w, r, http.StatusConflict, refused.Reason)
	case errors.Is(err, rpc.ErrNotFound):
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("node %d is not in the cluster's node table (see GET /nodes)", id))
	case err != nil:
		s.writeCallError(w, r, fmt.Sprintf("remove node %d", id), err)
	default:
		s.log.Info().Uint64("node", id).Bool("force", force).Str("state", v.State).Msg("node removal started")
		writeJSON(w, http.StatusAccepted, withGroups(v))
	}
}

// withGroups shows a node in no group as "groups": [], not null.
func withGroups(v NodeView) NodeView {
	if v.Groups == nil {
		v.Groups = []GroupRole{}
	}
	return v
}
