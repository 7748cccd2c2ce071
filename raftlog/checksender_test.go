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
	g.leader.Store(&LeaderEvent{Group: 3, Leader: 2, Term: 8})
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
		// Bug 11: this replica's configuration lags; the group replaced
		// node 4's replica, or added node 5, whose replica now leads at a
		// term this replica never saw. It must hear them to catch up.
		{"newer replica of a member's node", ReplicaID(4, 7), ReplicaID(1, 2), delivered},
		{"a leader added since, at a higher term", ReplicaID(5, 0), ReplicaID(1, 2), delivered},
		{"a stranger's vote request at a higher term", ReplicaID(5, 0), ReplicaID(1, 2), dropped},
		{"a stranger's append at this replica's term", ReplicaID(5, 0), ReplicaID(1, 2), dropped},
	} {
		typ, term := pb.MessageType_MsgHeartbeat, uint64(9)
		switch c.name {
		case "a stranger's vote request at a higher term":
			typ = pb.MessageType_MsgPreVote
		case "a stranger's append at this replica's term":
			typ, term = pb.MessageType_MsgApp, 8
		}
		if got := n.checkSender(g, &pb.Message{Type: typ.Enum(), Term: new(term), From: new(c.from), To: new(c.to)}); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
