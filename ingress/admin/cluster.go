package admin

import (
	"net/http"
)

// NodeStatus is one node as this node knows it (from gossip).
type NodeStatus struct {
	ID          uint64 `json:"id"`
	IngressAddr string `json:"ingressAddr,omitempty"`
	AdminAddr   string `json:"adminAddr,omitempty"`
	// NodeAddr is where the node's Raft/dispatch gRPC listens.
	NodeAddr   string `json:"nodeAddr,omitempty"`
	GossipAddr string `json:"gossipAddr,omitempty"`
	Alive      bool   `json:"alive"`
	// Version is the node's build version. /cluster leaves it empty
	// (gossip does not carry it); raftgate status asks each node's
	// GET /version.
	Version string `json:"version,omitempty"`
}

// PartitionStatus is one Raft group as this node knows it.
type PartitionStatus struct {
	// ID is 1..P for partitions; 0 is the metadata group.
	ID uint32 `json:"id"`
	// FirstKey and LastKey bound the partition-key range it owns
	// (invocation.KeyRange); strings in JSON so that no client loses bits.
	FirstKey uint64 `json:"firstKey,string"`
	LastKey  uint64 `json:"lastKey,string"`
	// Leader is the node id of the leader (0 when none is known) at Term.
	Leader uint64 `json:"leader"`
	Term   uint64 `json:"term"`
	// AppliedIndex is this node's applied index for the group.
	AppliedIndex uint64 `json:"appliedIndex"`
	// Replicas is the leader's progress of each voter; empty when this
	// node does not lead the group.
	Replicas []ReplicaStatus `json:"replicas"`
	// OutboxDepth is the number of deliveries not yet completed, when this
	// node knows it (it leads the partition); nil otherwise.
	OutboxDepth *int `json:"outboxDepth,omitempty"`
	// StateDigest is a hash (hex) of this node's replicated state of the
	// group at DigestIndex; only with GET /cluster?digest=1 (it reads the
	// whole state). Replicas at the same index must show the same
	// digest; a difference means divergence.
	StateDigest string `json:"stateDigest,omitempty"`
	DigestIndex uint64 `json:"digestIndex,omitempty"`
}

// ReplicaStatus is the leader's view of one voter of a group.
type ReplicaStatus struct {
	NodeID uint64 `json:"nodeId"`
	// Match is the highest log index known to be replicated on the node.
	Match uint64 `json:"match"`
	// Down: the leader has not heard from the node within the last one to
	// two election timeouts (about 0.5-1 s with the default ticks), so
	// Match may be long out of date and the lag is unknown.
	Down bool `json:"down"`
	// Lag is the leader's commit index minus Match; null when Down.
	Lag *uint64 `json:"lag"`
	// State is the raft progress state (probe, replicate, snapshot), when known.
	State string `json:"state,omitempty"`
}

// ClusterView is the JSON form of GET /cluster.
type ClusterView struct {
	Ready      bool              `json:"ready"`
	Nodes      []NodeStatus      `json:"nodes"`
	Partitions []PartitionStatus `json:"partitions"`
}

func (s *server) getCluster(w http.ResponseWriter, r *http.Request) {
	view := ClusterView{
		Ready:      s.cfg.Cluster.Ready(),
		Nodes:      s.cfg.Cluster.Nodes(),
		Partitions: s.cfg.Cluster.Partitions(r.URL.Query().Get("digest") == "1"),
	}
	if r.URL.Query().Get("leaders") == "1" {
		ctx, cancel := s.callContext(r)
		s.fillFromLeaders(ctx, r, &view)
		cancel()
	}
	if view.Nodes == nil {
		view.Nodes = []NodeStatus{}
	}
	if view.Partitions == nil {
		view.Partitions = []PartitionStatus{}
	}
	for i := range view.Partitions {
		if view.Partitions[i].Replicas == nil {
			view.Partitions[i].Replicas = []ReplicaStatus{}
		}
	}
	writeJSON(w, http.StatusOK, view)
}
