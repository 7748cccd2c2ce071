package leadership

import (
	"errors"
	"fmt"
	"log"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
)

// ErrClosed is returned by Join after Close.
var ErrClosed = errors.New("leadership: closed")

// Membership is this node's view of the cluster: members and the partition
// leader table. Its methods are safe for concurrent use.
type Membership struct {
	cfg   Config
	log   zerolog.Logger
	meta  []byte
	list  *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue

	// mu guards the voters, the leader table, the member map and the
	// outsiders already logged.
	mu sync.Mutex
	// voters is Config.Voters as a set, then what SetVoters says; nil
	// admits every node.
	voters    map[uint64]bool
	leaders   table
	members   map[uint64]Member
	outsiders map[uint64]bool

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start binds gossip (or takes cfg.Listener), joins the configured
// addresses (a failure is logged and retried in the background) and
// returns the running Membership.
func Start(cfg Config) (_ *Membership, err error) {
	if cfg.Listener != nil {
		defer func() {
			if err != nil {
				cfg.Listener.Close()
			}
		}()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Membership{
		cfg:     cfg,
		log:     cfg.Logger.With().Str("component", "leadership").Logger(),
		meta:    encodeNodeInfo(cfg.Self),
		leaders: table{},
		members: map[uint64]Member{cfg.Self.ID: {NodeInfo: cfg.Self, Alive: true}},
		stop:    make(chan struct{}),
	}
	if len(cfg.Voters) > 0 {
		m.voters = map[uint64]bool{}
		for _, id := range cfg.Voters {
			m.voters[id] = true
		}
		m.outsiders = map[uint64]bool{}
	}
	mc, err := m.memberlistConfig()
	if err != nil {
		return nil, err
	}
	m.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       m.numAlive,
		RetransmitMult: cfg.RetransmitMult,
	}
	list, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("leadership: start gossip on %s: %w", cfg.BindAddr, err)
	}
	m.list = list
	if len(cfg.Join) > 0 {
		if n, err := m.Join(cfg.Join...); err != nil {
			m.log.Warn().Err(err).Int("joined", n).Strs("join", cfg.Join).Msg("join failed, retrying in background")
		}
	}
	m.wg.Add(1)
	go m.rejoinLoop()
	m.log.Info().Str("bind", cfg.BindAddr).Msg("gossip started")
	return m, nil
}

func (m *Membership) memberlistConfig() (*memberlist.Config, error) {
	c := memberlist.DefaultLANConfig()
	c.Name = "raftgate-" + strconv.FormatUint(m.cfg.Self.ID, 10)
	host, port, err := splitHostPort(m.cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: BindAddr: %v", ErrInvalidConfig, err)
	}
	c.BindAddr, c.BindPort = host, port
	c.AdvertisePort = port
	if m.cfg.Listener != nil {
		c.Transport = m.cfg.Listener.transport
	}
	if m.cfg.AdvertiseAddr != "" {
		c.AdvertiseAddr, c.AdvertisePort, _ = splitHostPort(m.cfg.AdvertiseAddr)
	}
	if len(m.cfg.SecretKey) > 0 {
		c.SecretKey = slices.Clone(m.cfg.SecretKey)
	}
	c.GossipInterval = m.cfg.GossipInterval
	c.ProbeInterval = m.cfg.ProbeInterval
	c.ProbeTimeout = m.cfg.ProbeTimeout
	c.PushPullInterval = m.cfg.PushPullInterval
	c.SuspicionMult = m.cfg.SuspicionMult
	c.RetransmitMult = m.cfg.RetransmitMult
	c.TCPTimeout = m.cfg.TCPTimeout
	c.DeadNodeReclaimTime = m.cfg.DeadNodeReclaimTime
	c.GossipToTheDeadTime = 10 * m.cfg.ProbeInterval
	c.Delegate = delegate{m}
	c.Events = events{m}
	c.Logger = log.New(memberlistLog{log: m.cfg.Logger.With().Str("component", "memberlist").Logger(), closing: m.stop}, "", 0)
	return c, nil
}

// Join joins the cluster through the given gossip addresses and returns how
// many were reached. Start calls it with Config.Join.
func (m *Membership) Join(addrs ...string) (int, error) {
	select {
	case <-m.stop:
		return 0, ErrClosed
	default:
	}
	n, err := m.list.Join(addrs)
	if err != nil {
		return n, fmt.Errorf("leadership: join %v: %w", addrs, err)
	}
	return n, nil
}

// rejoinLoop periodically joins the configured addresses that are not alive
// members, so that a node that was cut off (or started before its peers)
// finds the cluster again.
func (m *Membership) rejoinLoop() {
	defer m.wg.Done()
	if len(m.cfg.Join) == 0 {
		return
	}
	t := time.NewTicker(m.cfg.RejoinInterval)
	defer t.Stop()
	// lastErr is the failure last logged at warn ("" once every join
	// address is a member): a lasting cause, such as peers refusing this
	// node's gossip key, is logged once, not every interval.
	var lastErr string
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		missing := m.joinAddrsNotAlive()
		if len(missing) == 0 {
			if lastErr != "" {
				m.log.Info().Msg("every join address is a gossip member again")
				lastErr = ""
			}
			continue
		}
		if _, err := m.list.Join(missing); err != nil {
			ev := m.log.Debug()
			if msg := err.Error(); msg != lastErr {
				ev, lastErr = m.log.Warn(), msg
			}
			ev.Err(err).Strs("addrs", missing).Msg("cannot join gossip members; retrying")
		}
	}
}

// joinAddrsNotAlive lists the join addresses no alive member gossips from.
func (m *Membership) joinAddrsNotAlive() []string {
	alive := map[string]bool{m.list.LocalNode().Address(): true}
	// From this package's own copy (events), not m.list.Members(): those are
	// memberlist's live nodes, which it updates while we would read them.
	m.mu.Lock()
	for _, mem := range m.members {
		if mem.Alive {
			alive[mem.GossipAddr] = true
		}
	}
	m.mu.Unlock()
	var missing []string
	for _, a := range m.cfg.Join {
		addr := a
		if ua, err := net.ResolveUDPAddr("udp", a); err == nil {
			addr = ua.String()
		}
		if !alive[addr] {
			missing = append(missing, a)
		}
	}
	return missing
}

// SetLocal records a leadership change this node's Raft reported for a
// partition (leader 0: no leader known at term) and spreads it.
func (m *Membership) SetLocal(partition uint32, leader, term uint64) {
	m.update(Update{Partition: partition, Entry: Entry{Leader: leader, Term: term}}, true)
}

// Hint records the leader a NOT_LEADER answer named and spreads it if it is
// news.
func (m *Membership) Hint(partition uint32, leader, term uint64) {
	m.update(Update{Partition: partition, Entry: Entry{Leader: leader, Term: term}}, true)
}

// Leader returns the partition's leader as far as this node knows; ok is
// false when no leader is known.
func (m *Membership) Leader(partition uint32) (leader, term uint64, ok bool) {
	m.mu.Lock()
	e := m.leaders[partition]
	m.mu.Unlock()
	return e.Leader, e.Term, e.Leader != 0
}

// Leaders returns the whole table, sorted by partition.
func (m *Membership) Leaders() []Update {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leaders.updates()
}

// Members returns every node seen, alive or not, sorted by ID.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		out = append(out, mem)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// SetVoters replaces the nodes admitted as members with ids (and this
// node): the cluster record's members, which change as nodes join and are
// removed. A member no longer admitted is dropped; a node admitted now that
// gossip already knows becomes a member at once.
func (m *Membership) SetVoters(ids []uint64) {
	m.mu.Lock()
	m.voters = make(map[uint64]bool, len(ids)+1)
	for _, id := range ids {
		m.voters[id] = true
	}
	m.voters[m.cfg.Self.ID] = true
	if m.outsiders == nil {
		m.outsiders = map[uint64]bool{}
	}
	for id := range m.members {
		if !m.voters[id] {
			delete(m.members, id)
		}
	}
	for id := range m.outsiders {
		if m.voters[id] {
			delete(m.outsiders, id) // logged again if it is removed later
		}
	}
	m.mu.Unlock()
	for _, n := range m.list.Members() {
		if n.Name != m.list.LocalNode().Name {
			m.setMember(n, true)
		}
	}
}

// isVoter reports whether id may be a member (see Config.Voters).
func (m *Membership) isVoter(id uint64) bool {
	return m.voters == nil || m.voters[id]
}

// maxOutsidersLogged bounds the outsiders remembered as logged: ids are
// chosen by whoever gossips, so the set must not grow without bound.
const maxOutsidersLogged = 64

// noteOutsiderLocked logs, once per node id, that a node outside the
// voters was seen; m.mu is held. addr is its gossip address, when known.
func (m *Membership) noteOutsiderLocked(id uint64, addr string) {
	if m.outsiders[id] {
		return
	}
	ev := m.log.Debug()
	if len(m.outsiders) < maxOutsidersLogged {
		m.outsiders[id] = true
		ev = m.log.Warn()
	}
	ev.Uint64("member", id).Str("gossip_addr", addr).
		Msg("ignoring a node that is not a member of the cluster: it is not listed as a member and its leadership gossip is dropped (a new node joins with `raftgate server --join` and no --node-id; see docs/operations.md)")
}

// numAlive counts alive members; it sizes broadcast retransmits. It reads
// the member map rather than memberlist, which calls it during Create.
func (m *Membership) numAlive() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, mem := range m.members {
		if mem.Alive {
			n++
		}
	}
	return n
}

// Node returns one member by id.
func (m *Membership) Node(id uint64) (Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[id]
	return mem, ok
}

// Close leaves the cluster (bounded by LeaveTimeout), stops gossip and
// waits for the background goroutines.
func (m *Membership) Close() error {
	m.closeOnce.Do(func() {
		close(m.stop)
		if err := m.list.Leave(m.cfg.LeaveTimeout); err != nil {
			m.log.Warn().Err(err).Msg("leave")
		}
		if err := m.list.Shutdown(); err != nil {
			m.closeErr = fmt.Errorf("leadership: shutdown gossip: %w", err)
		}
		m.wg.Wait()
	})
	return m.closeErr
}

// update merges one update; a change is broadcast when spread is true.
func (m *Membership) update(u Update, spread bool) {
	m.mu.Lock()
	changed := m.leaders.apply(u)
	if changed {
		u.Entry = m.leaders[u.Partition] // broadcast what the table holds
	}
	m.mu.Unlock()
	if changed && spread {
		m.broadcast(u)
	}
}

// mergeAll merges gossiped updates; those naming a leader that is not a
// voter are dropped (only a voter can lead one of the cluster's groups).
func (m *Membership) mergeAll(us []Update, spread bool) {
	m.mu.Lock()
	us = slices.DeleteFunc(slices.Clone(us), func(u Update) bool {
		if u.Leader == 0 || m.isVoter(u.Leader) {
			return false
		}
		m.noteOutsiderLocked(u.Leader, "")
		return true
	})
	changed := m.leaders.applyAll(us)
	m.mu.Unlock()
	if spread {
		for _, u := range changed {
			m.broadcast(u)
		}
	}
}

func (m *Membership) broadcast(u Update) {
	m.queue.QueueBroadcast(leaderBroadcast{
		name: "leader/" + strconv.FormatUint(uint64(u.Partition), 10),
		msg:  encodeUpdates([]Update{u}),
	})
}

// leaderBroadcast carries one partition's entry; a newer one for the same
// partition replaces it in the queue (NamedBroadcast).
type leaderBroadcast struct {
	name string
	msg  []byte
}

func (b leaderBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(leaderBroadcast)
	return ok && o.name == b.name
}
func (b leaderBroadcast) Name() string    { return b.name }
func (b leaderBroadcast) Message() []byte { return b.msg }
func (b leaderBroadcast) Finished()       {}
