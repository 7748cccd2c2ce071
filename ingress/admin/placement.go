package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/raftgate/raftgate/rpc"
)

// Placement is where the partitions' replicas are (package cluster's record), for /placement.
// Called from HTTP handler goroutines, concurrently; errors are rpc errors
// as for Invocations (rpc.ErrInvalid, rpc.ErrNotFound, not-leader and
// unavailable ones), a *ConflictError (or *RefusedError) for a change the
// cluster cannot make now, and calls honour ctx.
type Placement interface {
	Placement(ctx context.Context) (PlacementView, error)
	// SetReplication changes the replicas per partition; SetPaused stops or resumes rebalancing (repairs go on).
	SetReplication(ctx context.Context, r int) error
	SetPaused(ctx context.Context, paused bool) error
	// Move asks for partition p's replica on node from to move to node to.
	Move(ctx context.Context, p uint32, from, to uint64) error
}

// PlacementView is the JSON form of GET /placement.
type PlacementView struct {
	Replication int                  `json:"replication"`
	Paused      bool                 `json:"paused"`
	Partitions  []PartitionPlacement `json:"partitions"`
}

// PartitionPlacement is one partition's replicas, leaders and move.
type PartitionPlacement struct {
	ID              uint32        `json:"id"`
	Replicas        []ReplicaRole `json:"replicas"` // the configuration its leader last recorded, and target nodes not in it yet as "incoming"
	PreferredLeader uint64        `json:"preferredLeader"`
	Leader          uint64        `json:"leader"` // 0 when unknown
	Version         uint64        `json:"version"`
	Move            *MoveView     `json:"move"` // null when the partition is on its target
}

// ReplicaRole is one replica of a partition and its role.
type ReplicaRole struct {
	Node uint64 `json:"node"`
	Role string `json:"role"` // voter, learner, incoming, outgoing
}

// MoveView is a move in flight: the nodes leaving and coming.
type MoveView struct {
	From []uint64 `json:"from"` // nodes leaving
	To   []uint64 `json:"to"`   // nodes coming
}

// ReplicationRequest is the body of PUT /placement/replication.
type ReplicationRequest struct {
	Replication int `json:"replication"`
}

// MoveRequest is the body of POST /placement/partitions/{p}/move.
type MoveRequest struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// ConflictError is a placement change the cluster cannot make now (409),
// such as a move that would leave a partition without a quorum of live
// voters; Reason says why.
type ConflictError struct{ Reason string }

func (e *ConflictError) Error() string { return "placement change refused: " + e.Reason }

// noPlacement is the answer of the placement routes when the wiring gives no Placement.
const noPlacement = "this node does not serve placement (/placement): it runs without cluster membership"

// maxPlacementBody bounds the JSON bodies of the placement changes.
const maxPlacementBody = 4 << 10

func (s *server) getPlacement(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Placement == nil {
		s.writeError(w, r, http.StatusNotImplemented, noPlacement)
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	v, err := s.cfg.Placement.Placement(ctx)
	if err != nil {
		s.writeCallError(w, r, "placement", err)
		return
	}
	writeJSON(w, http.StatusOK, withLists(v))
}

// setReplication serves PUT /placement/replication: 204 once the new
// replication is recorded (the moves toward it follow).
func (s *server) setReplication(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Placement == nil {
		s.writeError(w, r, http.StatusNotImplemented, noPlacement)
		return
	}
	var req ReplicationRequest
	if err := decodePlacementBody(w, r, &req, `{"replication": 3}`); err != nil {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("set replication: %v", err))
		return
	}
	if req.Replication < 1 {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("set replication: replication %d: want 1 or more replicas per partition", req.Replication))
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	err := s.cfg.Placement.SetReplication(ctx, req.Replication)
	if s.placementError(w, r, fmt.Sprintf("set replication to %d", req.Replication), err) {
		return
	}
	s.log.Info().Int("replication", req.Replication).Msg("replication set")
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) pausePlacement(w http.ResponseWriter, r *http.Request) {
	s.setPaused(w, r, true)
}

func (s *server) resumePlacement(w http.ResponseWriter, r *http.Request) {
	s.setPaused(w, r, false)
}

// setPaused serves POST /placement/pause and /placement/resume: 204;
// either is idempotent.
func (s *server) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	if s.cfg.Placement == nil {
		s.writeError(w, r, http.StatusNotImplemented, noPlacement)
		return
	}
	what := "resume rebalancing"
	if paused {
		what = "pause rebalancing"
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	if s.placementError(w, r, what, s.cfg.Placement.SetPaused(ctx, paused)) {
		return
	}
	s.log.Info().Bool("paused", paused).Msg("rebalancing paused or resumed")
	w.WriteHeader(http.StatusNoContent)
}

// movePartition serves POST /placement/partitions/{p}/move: 202, as the
// move goes on after the answer (GET /placement shows it in flight).
func (s *server) movePartition(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Placement == nil {
		s.writeError(w, r, http.StatusNotImplemented, noPlacement)
		return
	}
	p, err := strconv.ParseUint(r.PathValue("p"), 10, 32)
	if err != nil || p == 0 {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("malformed partition %q: want a partition id such as 3 (see GET /placement)", r.PathValue("p")))
		return
	}
	if p > uint64(s.cfg.Partitions) {
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("no partition %d: partitions are 1 to %d", p, s.cfg.Partitions))
		return
	}
	var req MoveRequest
	if err := decodePlacementBody(w, r, &req, `{"from": 2, "to": 5}`); err != nil {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("move partition %d: %v", p, err))
		return
	}
	if req.From == 0 || req.To == 0 || req.From == req.To {
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("move partition %d: want two different node ids, from and to (got %d and %d)", p, req.From, req.To))
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	what := fmt.Sprintf("move partition %d from node %d to node %d", p, req.From, req.To)
	if s.placementError(w, r, what, s.cfg.Placement.Move(ctx, uint32(p), req.From, req.To)) {
		return
	}
	s.log.Info().Uint64("partition", p).Uint64("from", req.From).Uint64("to", req.To).Msg("partition move asked")
	w.WriteHeader(http.StatusAccepted)
}

// placementError answers err of a placement change, if any, and reports
// whether it did: refusals are 409 with the reason, unknown partitions or
// nodes 404, the rest as every call into the cluster.
func (s *server) placementError(w http.ResponseWriter, r *http.Request, what string, err error) bool {
	var conflict *ConflictError
	var refused *RefusedError
	switch {
	case err == nil:
		return false
	case errors.As(err, &conflict):
		s.writeError(w, r, http.StatusConflict, fmt.Sprintf("%s: %s", what, conflict.Reason))
	case errors.As(err, &refused):
		s.writeError(w, r, http.StatusConflict, fmt.Sprintf("%s: %s", what, refused.Reason))
	case errors.Is(err, rpc.ErrNotFound):
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("%s: %v (GET /placement and GET /nodes show them)", what, err))
	default:
		s.writeCallError(w, r, what, err)
	}
	return true
}

// decodePlacementBody reads one JSON object into v; example shows the
// expected form in the error.
func decodePlacementBody(w http.ResponseWriter, r *http.Request, v any, example string) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPlacementBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("body must be JSON like %s", example)
		}
		return fmt.Errorf("body is not JSON like %s: %v", example, err)
	}
	if dec.More() {
		return errors.New("body has data after the JSON object")
	}
	return nil
}

// withLists shows empty lists as [], not null (a move stays null when
// none), in a copy: the implementation may share its slices.
func withLists(v PlacementView) PlacementView {
	v.Partitions = append([]PartitionPlacement{}, v.Partitions...)
	for i := range v.Partitions {
		p := &v.Partitions[i]
		if p.Replicas == nil {
			p.Replicas = []ReplicaRole{}
		}
		if p.Move != nil {
			m := *p.Move
			if m.From == nil {
				m.From = []uint64{}
			}
			if m.To == nil {
				m.To = []uint64{}
			}
			p.Move = &m
		}
	}
	return v
}
