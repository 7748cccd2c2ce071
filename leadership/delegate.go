package leadership

import (
	"github.com/hashicorp/memberlist"
)

// delegate is memberlist's Delegate: node metadata, leader-table broadcasts
// and push/pull state. memberlist calls it from several goroutines at once.
type delegate struct{ m *Membership }

func (d delegate) NodeMeta(limit int) []byte {
	if len(d.m.meta) > limit {
		// Validate refuses such a NodeInfo; never hand memberlist more than
		// its limit (it panics).
		return nil
	}
	return d.m.meta
}

// NotifyMsg receives a broadcast of leader updates; what is news to this
// node is broadcast again so that it spreads epidemically.
func (d delegate) NotifyMsg(buf []byte) {
	us, err := decodeUpdates(buf)
	if err != nil {
		d.m.log.Warn().Err(err).Msg("dropping gossip message")
		return
	}
	d.m.mergeAll(us, true)
}

func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.queue.GetBroadcasts(overhead, limit)
}

// LocalState sends the whole leader table in push/pull exchanges.
func (d delegate) LocalState(join bool) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	return encodeUpdates(d.m.leaders.updates())
}

// MergeRemoteState merges a peer's table. Changes are not broadcast: every
// node exchanges state periodically, so this is anti-entropy, not news.
func (d delegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) == 0 {
		return
	}
	us, err := decodeUpdates(buf)
	if err != nil {
		d.m.log.Warn().Err(err).Msg("dropping remote state")
		return
	}
	d.m.mergeAll(us, false)
}

// events is memberlist's EventDelegate. memberlist calls it from one
// goroutine at a time, in order.
type events struct{ m *Membership }

func (e events) NotifyJoin(n *memberlist.Node)   { e.m.setMember(n, true) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.setMember(n, true) }
func (e events) NotifyLeave(n *memberlist.Node)  { e.m.setMember(n, false) }

func (m *Membership) setMember(n *memberlist.Node, alive bool) {
	info, err := decodeNodeInfo(n.Meta)
	if err != nil {
		m.log.Warn().Err(err).Str("member", n.Name).Str("addr", n.Address()).Msg("ignoring member with bad metadata")
		return
	}
	if info.ID == 0 {
		return // a joining node's discovery probe (Discover)
	}
	m.mu.Lock()
	if !m.isVoter(info.ID) {
		m.noteOutsiderLocked(info.ID, n.Address())
		m.mu.Unlock()
		return
	}
	prev, had := m.members[info.ID]
	m.members[info.ID] = Member{NodeInfo: info, GossipAddr: n.Address(), Alive: alive}
	m.mu.Unlock()
	if !had || prev.Alive != alive {
		m.log.Info().Uint64("member", info.ID).Bool("alive", alive).Str("gossip_addr", n.Address()).Msg("member changed")
	}
}
