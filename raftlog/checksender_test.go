package raftlog

import (
	"testing"

	"github.com/rs/zerolog"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestCheckSenderTellsARemovedReplica: a message from a replica whose node
// has a newer replica in the group is answered "removed", also when it is
// addressed to an older replica of this node (the removed one slept
// through both changes). Without that answer the removed replica, in a
// configuration no member has any more, campaigns forever and its node
// never deletes it. And a message for a newer replica of this node stops
// the one running here.
func TestCheckSenderTellsARemovedReplica(t *testing.T) {
	n := &Node{log: zerolog.Nop()}
	g := &Group{id: 3, self: ReplicaID(1, 2)}
	g.conf.Store(&Membership{Voters: []uint64{ReplicaID(1, 2), ReplicaID(2, 5), ReplicaID(4, 0)}})
	for _, c := range []struct {
		name     string
		from, to uint64
		want     delivery
	}{
		{"removed sender, to this replica", ReplicaID(2, 1), ReplicaID(1, 2), fromRemoved},
		{"removed sender, to this node's older replica", ReplicaID(2, 1), ReplicaID(1, 0), fromRemoved},
		{"member, to this node's older replica", ReplicaID(4, 0), ReplicaID(1, 0), dropped},
		{"stranger, to this node's older replica", ReplicaID(3, 0), ReplicaID(1, 0), dropped},
		{"member, to this replica", ReplicaID(2, 5), ReplicaID(1, 2), delivered},
		// A learner removed while its node was down never sends, so
		// nobody tells it; the leader's messages to the node's newer
		// replica are the proof.
		{"member, to a newer replica of this node", ReplicaID(2, 5), ReplicaID(1, 3), toNewer},
	} {
		if got := n.checkSender(g, &pb.Message{From: new(c.from), To: new(c.to)}); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
