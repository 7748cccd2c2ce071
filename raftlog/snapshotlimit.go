package raftlog

import (
	"errors"
	"sync"
)

// Snapshot streams are bounded so that adding a node to many groups at
// once does not stream every group's state to it at the same moment
// (each stream holds a bbolt read transaction open on the sender and
// writes a spool file on the receiver): at most one outgoing stream per
// peer, and at most Config.SnapshotStreams outgoing and as many incoming
// on a node. A send over a bound is not started and a receive over it is
// refused; either way the sender reports SnapshotFailure to raft, which
// pauses the follower's progress and sends a MsgSnap again after the next
// heartbeat answer, so the snapshots queue up through raft's own retry
// and not in a queue of ours.

// DefaultSnapshotStreams is Config.SnapshotStreams's default: two
// snapshots at once in each direction, so that one large snapshot does
// not hold every other group back.
const DefaultSnapshotStreams = 2

// errSnapshotsBusy refuses a snapshot over this node's bound.
var errSnapshotsBusy = errors.New("raftlog: receiving as many snapshots as allowed; try again later")

// snapshotSlots counts the snapshot streams under way on a node.
type snapshotSlots struct {
	limit int

	// mu guards the counts and their high-water marks.
	mu    sync.Mutex
	out   int
	outTo map[uint64]int // by peer
	in    int
	// peakOut, peakOutTo (to one peer) and peakIn are the most streams
	// ever under way at once (tests read them).
	peakOut, peakOutTo, peakIn int
}

func newSnapshotSlots(limit int) *snapshotSlots {
	return &snapshotSlots{limit: limit, outTo: make(map[uint64]int)}
}

// startSend reserves a stream to peer; false when one goes there already
// or the node sends as many as it may. doneSend releases it.
func (s *snapshotSlots) startSend(peer uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outTo[peer] > 0 || s.out >= s.limit {
		return false
	}
	s.out++
	s.outTo[peer]++
	s.peakOut = max(s.peakOut, s.out)
	s.peakOutTo = max(s.peakOutTo, s.outTo[peer])
	return true
}

func (s *snapshotSlots) doneSend(peer uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out--
	if s.outTo[peer]--; s.outTo[peer] == 0 {
		delete(s.outTo, peer)
	}
}

// startReceive reserves an incoming stream; false over the bound.
// doneReceive releases it.
func (s *snapshotSlots) startReceive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.in >= s.limit {
		return false
	}
	s.in++
	s.peakIn = max(s.peakIn, s.in)
	return true
}

func (s *snapshotSlots) doneReceive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.in--
}

// peaks returns the high-water marks: outgoing, outgoing to one peer,
// incoming.
func (s *snapshotSlots) peaks() (out, outTo, in int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakOut, s.peakOutTo, s.peakIn
}
