package raftlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"

	"github.com/raftgate/raftgate/raftlog/wal"
)

// ErrGroupExists: AddGroup was called twice for one id.
var ErrGroupExists = errors.New("raftlog: group already added")

// Node hosts this process's Raft groups, their shared write-ahead log and
// state file with their two write paths, and the gRPC transport to peers.
type Node struct {
	cfg     Config
	log     zerolog.Logger
	wal     *wal.WAL
	db      *bolt.DB
	lw      *logWriter
	ap      *applier
	tr      transport
	server  *raftServer
	metrics *metrics
	lock    *DirLock // holds the data dir's flock (dirlock.go)
	snaps   *snapshotSlots
	// formatRaised: RaiseFormat has made the data dir format 3.
	formatRaised atomic.Bool

	// peersMu guards peers: every node's address, this one's too (the
	// transport's address book; SetPeer, RemovePeer).
	peersMu sync.RWMutex
	peers   map[uint64]string
	// gone are the nodes RemovePeer dropped: their messages get the
	// "removed" answer.
	gone map[uint64]bool

	// mu guards groups, removing and closed.
	mu       sync.RWMutex
	groups   map[GroupID]*Group
	removing map[GroupID]bool // RemoveGroup under way
	closed   bool

	// watchMu guards watchers and watchSeq.
	watchMu  sync.Mutex
	watchers map[uint64]*watcher
	watchSeq uint64

	// failed receives the first error that stopped a group, or
	// ErrNotAMember (buffered).
	failed chan error
	// refusals are the peers that refuse this node's messages.
	refusals peerRefusals

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type watcher struct {
	fn        func(LeaderEvent)
	cancelled atomic.Bool
}

// Open opens (or creates) the node's storage. Call RegisterGRPC on the
// server that listens at Peers[NodeID], then AddGroup for every group.
func Open(cfg Config) (*Node, error) {
	if cfg.Knobs != nil && cfg.Knobs.Network != nil {
		return open(cfg, cfg.Knobs.Network.transportFor)
	}
	return open(cfg, func(n *Node) transport { return newGRPCTransport(n) })
}

// open lets tests swap the transport (MemNetwork.transportFor).
func open(cfg Config, newTransport func(*Node) transport) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	lock := cfg.DataDirLock
	if lock == nil {
		var err error
		if lock, err = LockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	n, err := openLocked(cfg, newTransport)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	n.lock = lock
	return n, nil
}

// openLocked opens the data dir, which lockDataDir has locked.
func openLocked(cfg Config, newTransport func(*Node) transport) (*Node, error) {
	if err := tightenModes(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("raftlog: data dir modes: %w", err)
	}
	snapDir := filepath.Join(cfg.DataDir, snapDirName)
	// Spooled snapshots of a previous run were never installed (an
	// installed one is deleted), so they are garbage.
	if err := os.RemoveAll(snapDir); err != nil {
		return nil, fmt.Errorf("raftlog: clear snapshot spool: %w", err)
	}
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		return nil, fmt.Errorf("raftlog: create data dir: %w", err)
	}
	lg := cfg.Logger.With().Str("component", "raftlog").Logger()
	if err := migrateFormat1(cfg.DataDir, lg); err != nil {
		return nil, err
	}
	w, err := wal.Open(wal.Options{
		Dir:         filepath.Join(cfg.DataDir, walDirName),
		SegmentSize: cfg.WALSegmentBytes,
		FS:          logFS(cfg.Knobs),
		Knobs:       cfg.Knobs.walKnobs(),
		Logger:      lg,
	})
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	db, err := openStateDB(filepath.Join(cfg.DataDir, stateFile))
	if err == nil {
		err = checkFormat(db)
		if err != nil {
			db.Close()
		}
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	n := &Node{
		cfg:      cfg,
		log:      lg,
		wal:      w,
		db:       db,
		metrics:  newMetrics(cfg.Registerer, fileSize(db.Path()), func() float64 { return float64(w.Stats().SegmentBytes) }),
		snaps:    newSnapshotSlots(cfg.SnapshotStreams),
		peers:    maps.Clone(cfg.Peers),
		gone:     make(map[uint64]bool),
		groups:   make(map[GroupID]*Group),
		removing: make(map[GroupID]bool),
		watchers: make(map[uint64]*watcher),
		stop:     make(chan struct{}),
		failed:   make(chan error, 1),
	}
	if noSync {
		n.log.Warn().Msg("built with raftgate_nosync: fsync is OFF, acknowledged writes are lost on power loss; for measurements only")
	}
	n.server = &raftServer{n: n}
	n.tr = newTransport(n)
	stepped := cfg.Knobs.stepped()
	n.lw = newLogWriter(w, n.log, n.metrics, n.tr, stepped)
	n.ap = newApplier(db, n.log, n.metrics, cfg.Knobs, checkpointPolicy{interval: cfg.CheckpointInterval, entries: cfg.CheckpointEntries}, n.lw.breakOff)
	if err := n.finishRemovals(); err != nil {
		n.Close()
		return nil, err
	}
	if cfg.Knobs == nil || !cfg.Knobs.ManualTicks && !cfg.Knobs.Stepped {
		n.wg.Add(1)
		go n.tickLoop()
	}
	return n, nil
}

// openStateDB opens state.db.
func openStateDB(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        2 * time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		NoSync:         noSync,
		// A large initial mapping avoids remaps, which wait for every read
		// transaction (a snapshot being streamed) to finish.
		InitialMmapSize: 1 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", stateFile, err)
	}
	return db, nil
}

// RegisterGRPC registers the Raft transport service on s.
func (n *Node) RegisterGRPC(s grpc.ServiceRegistrar) { n.server.register(s) }

// AddGroup starts group id with the given voters (used only to bootstrap a
// group that has no state on disk: every voter's replica has generation 0)
// and state machine. sm.Restore is called before AddGroup returns. Groups
// may be added while the node runs, and removed (RemoveGroup). A group
// this node joined (JoinGroup) reopens with AddGroup too: its state on
// disk names its replica.
func (n *Node) AddGroup(id GroupID, voters []uint64, sm StateMachine) (*Group, error) {
	voters = slices.Clone(voters)
	slices.Sort(voters)
	voters = slices.Compact(voters)
	if len(voters) == 0 || !slices.Contains(voters, n.cfg.NodeID) {
		return nil, fmt.Errorf("raftlog: group %d: voters %v must include node %d", id, voters, n.cfg.NodeID)
	}
	for _, v := range voters {
		if _, ok := n.peerAddr(v); !ok {
			return nil, fmt.Errorf("raftlog: group %d: voter %d not in Config.Peers", id, v)
		}
	}
	return n.addGroup(id, voters, 0, sm)
}

// JoinGroup starts this node's replica (Raft id replica, see ReplicaID)
// of a group that runs elsewhere: blank, with no configuration, it
// campaigns for nothing and waits for the group's leader, which added it
// as a learner (Group.AddLearner), to send it a snapshot. Reopening it
// after a restart is AddGroup or JoinGroup with the same replica.
func (n *Node) JoinGroup(id GroupID, replica uint64, sm StateMachine) (*Group, error) {
	if NodeOf(replica) != n.cfg.NodeID {
		return nil, fmt.Errorf("raftlog: group %d: replica %#x is not on node %d", id, replica, n.cfg.NodeID)
	}
	return n.addGroup(id, nil, replica, sm)
}

func (n *Node) addGroup(id GroupID, voters []uint64, replica uint64, sm StateMachine) (*Group, error) {
	if sm == nil {
		return nil, fmt.Errorf("raftlog: group %d: nil state machine", id)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrStopped
	}
	if _, ok := n.groups[id]; ok {
		return nil, fmt.Errorf("%w: %d", ErrGroupExists, id)
	}
	if n.removing[id] {
		return nil, fmt.Errorf("%w: %d is being removed", ErrGroupExists, id)
	}
	if err := n.updateState(func(tx *bolt.Tx) error { return createGroupState(tx, id, voters, replica) }); err != nil {
		return nil, fmt.Errorf("raftlog: create group %d: %w", id, err)
	}
	var gs groupState
	err := n.db.View(func(tx *bolt.Tx) error {
		gb, err := openGroupBuckets(tx, id)
		if err != nil {
			return err
		}
		if gs, err = readGroupState(gb); err != nil {
			return err
		}
		return sm.Restore(gb.state)
	})
	if err != nil {
		return nil, fmt.Errorf("raftlog: group %d: open state: %w", id, err)
	}
	if gs.replica == 0 {
		gs.replica = n.cfg.NodeID
	}
	if replica != 0 && gs.replica != replica {
		return nil, fmt.Errorf("raftlog: group %d: this data dir holds replica %#x of it, not %#x; remove the group first", id, gs.replica, replica)
	}
	store, err := n.openLog(id, gs)
	if err != nil {
		return nil, err
	}
	g, err := newGroup(n, id, gs, store, sm)
	if err != nil {
		return nil, err
	}
	n.groups[id] = g
	if n.cfg.Knobs.stepped() {
		g.publishLeader(0, g.rn.BasicStatus().GetTerm(), false)
		return g, nil
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		g.run()
	}()
	return g, nil
}

// SetPeer adds node id to the transport's address book, or changes its
// address: messages to its replicas go to addr from now on, and messages
// from it are accepted. Peers are the union of Config.Peers and what
// SetPeer added since the node opened; the caller (the cluster's node
// table) sets them again after a restart.
func (n *Node) SetPeer(id uint64, addr string) error {
	if id == 0 || id > maxNodeID || addr == "" {
		return fmt.Errorf("%w: peer %d at %q", ErrInvalidConfig, id, addr)
	}
	if id == n.cfg.NodeID {
		return nil
	}
	n.peersMu.Lock()
	same := n.peers[id] == addr
	n.peers[id] = addr
	delete(n.gone, id)
	n.peersMu.Unlock()
	if !same {
		n.tr.setPeer(id, addr)
	}
	return nil
}

// RemovePeer drops node id from the address book, for good (a node removed
// from the cluster): nothing more is sent to it, and its messages are
// refused with the "removed" answer, which stops their groups on it.
func (n *Node) RemovePeer(id uint64) {
	if id == n.cfg.NodeID {
		return
	}
	n.peersMu.Lock()
	_, ok := n.peers[id]
	delete(n.peers, id)
	n.gone[id] = true
	n.peersMu.Unlock()
	if ok {
		n.tr.removePeer(id)
	}
}

// isGone says whether RemovePeer removed node id.
func (n *Node) isGone(id uint64) bool {
	n.peersMu.RLock()
	defer n.peersMu.RUnlock()
	return n.gone[id]
}

// peerAddr is node id's address in the address book.
func (n *Node) peerAddr(id uint64) (string, bool) {
	n.peersMu.RLock()
	defer n.peersMu.RUnlock()
	addr, ok := n.peers[id]
	return addr, ok
}

// Group returns a started group, or nil.
func (n *Node) Group(id GroupID) *Group {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.groups[id]
}

func (n *Node) groupList() []*Group {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]*Group, 0, len(n.groups))
	for _, g := range n.groups {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *Group) int { return int(a.id) - int(b.id) })
	return out
}

// Watch calls fn for every leadership change of every group, and once at
// once for each group's current state. fn runs on group goroutines and must
// not block. cancel stops further calls.
func (n *Node) Watch(fn func(LeaderEvent)) (cancel func()) {
	w := &watcher{fn: fn}
	n.watchMu.Lock()
	n.watchSeq++
	id := n.watchSeq
	n.watchers[id] = w
	n.watchMu.Unlock()
	for _, g := range n.groupList() {
		g.enqueueControl(func() {
			if !w.cancelled.Load() {
				fn(g.leaderEvent())
			}
		})
	}
	return func() {
		w.cancelled.Store(true)
		n.watchMu.Lock()
		delete(n.watchers, id)
		n.watchMu.Unlock()
	}
}

func (n *Node) notify(ev LeaderEvent) {
	n.watchMu.Lock()
	ws := make([]*watcher, 0, len(n.watchers))
	for _, w := range n.watchers {
		ws = append(ws, w)
	}
	n.watchMu.Unlock()
	for _, w := range ws {
		if !w.cancelled.Load() {
			w.fn(ev)
		}
	}
}

// TransferAll moves the leadership of every group this node leads to
// another voter (graceful shutdown) and returns when none is led here or ctx
// ends.
func (n *Node) TransferAll(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(n.groupList()))
	for _, g := range n.groupList() {
		if !g.leaderEvent().IsSelf {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := g.transferTarget()
			if to == 0 {
				errs <- fmt.Errorf("raftlog: group %d: no other voter to transfer to", g.id)
				return
			}
			if err := g.TransferLeadership(ctx, to); err != nil {
				errs <- fmt.Errorf("raftlog: group %d: %w", g.id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// Tick advances every group's Raft clock by one tick. It is the time source
// when Knobs.ManualTicks is set (tests); otherwise a ticker calls it every
// TickInterval.
func (n *Node) Tick() {
	for _, g := range n.groupList() {
		g.addTick()
	}
}

func (n *Node) tickLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			n.Tick()
		case <-n.stop:
			return
		}
	}
}

// Backup writes a consistent copy of the node's state.db (every group's
// state machine at its last checkpoint, with the applied index it
// reflects) to w from one read transaction, while
// the node keeps running; size is called with the copy's length before the
// first byte. It returns the bytes written. The read transaction stays
// open while w is slow, and bbolt cannot reuse the pages it sees freed
// meanwhile, so the file may grow during a long copy; Close ends a copy in
// progress (with ErrStopped) at its next write.
func (n *Node) Backup(w io.Writer, size func(int64)) (int64, error) {
	if n.isClosed() {
		return 0, ErrStopped
	}
	// Checkpoint first, so the copy holds everything applied until now.
	if err := n.checkpointNow(context.Background()); err != nil {
		return 0, err
	}
	var written int64
	err := n.db.View(func(tx *bolt.Tx) error {
		size(tx.Size())
		var err error
		written, err = tx.WriteTo(stopWriter{w: w, stop: n.stop})
		return err
	})
	if err != nil && n.isClosed() {
		// bbolt does not wrap the writer's error.
		return written, fmt.Errorf("%w (backup ended: %v)", ErrStopped, err)
	}
	return written, err
}

// checkpointNow has the applier checkpoint everything it applied so far
// (nothing to do when nothing is pending) and waits for it, or for ctx.
func (n *Node) checkpointNow(ctx context.Context) error {
	flush := &applyReq{flush: true, done: make(chan struct{})}
	if !n.ap.submit(flush) {
		return ErrStopped
	}
	n.ap.runIfStepped()
	select {
	case <-flush.done:
		return ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopWriter fails once stop is closed, so that a copy to a slow reader
// ends its read transaction when the node closes (bbolt's Close waits for
// every read transaction).
type stopWriter struct {
	w    io.Writer
	stop <-chan struct{}
}

func (s stopWriter) Write(p []byte) (int, error) {
	select {
	case <-s.stop:
		return 0, ErrStopped
	default:
	}
	return s.w.Write(p)
}

// Close stops every group, the transport and the write loop, and closes
// the bbolt file. Safe to call twice.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		groups := make([]*Group, 0, len(n.groups))
		for _, g := range n.groups {
			groups = append(groups, g)
		}
		n.mu.Unlock()
		// Groups and the writers first: they are the transport's senders;
		// the applier checkpoints what was applied. Then the transport (its
		// snapshot streams read state.db), then the files.
		close(n.stop)
		for _, g := range groups {
			g.stop()
		}
		n.wg.Wait()
		n.lw.close()
		n.ap.close()
		n.tr.close()
		n.closeErr = errors.Join(n.db.Close(), n.wal.Close())
		if n.lock != nil {
			_ = n.lock.Close() // releases the flock, last
		}
	})
	return n.closeErr
}

// delivery is what became of a message handed to deliver.
type delivery int

const (
	delivered delivery = iota
	// dropped: the group is unknown here, its inbox is full, or the
	// sender or addressee is not one of its replicas (raft recovers lost
	// messages).
	dropped
	// fromRemoved: the sender is a replica the group removed; the
	// transport tells its node (Node.removedByPeer).
	fromRemoved
	// toNewer: addressed to a newer replica of this node than the one
	// running here, which the group thus removed (a configuration holds
	// one replica per node): it stops, so that the node can open the new
	// one.
	toNewer
)

// deliver hands a message received from a peer to its group. The sender
// must be a member of the group's applied configuration (voter or
// learner, either half of a joint one), except for a blank replica, which
// has no configuration until its first snapshot and hears from any peer.
func (n *Node) deliver(id GroupID, m *pb.Message) delivery {
	g := n.Group(id)
	if g == nil {
		return dropped
	}
	if d := n.checkSender(g, m); d != delivered {
		if d == toNewer {
			n.removedByPeer(id, g.self)
		}
		return d
	}
	if m.GetType() == pb.MsgSnap {
		// A snapshot's Data names a local spool file, so a MsgSnap is only
		// taken from the Snapshot RPC, which writes that file itself
		// (deliverSnapshot); one arriving any other way is forged.
		n.log.Warn().Uint32("group", uint32(id)).Uint64("from", m.GetFrom()).Msg("raft message refused: a snapshot arrives only on the Snapshot RPC")
		return dropped
	}
	if !g.enqueueMessage(m) {
		return dropped
	}
	return delivered
}

// deliverSnapshot hands group id a MsgSnap whose state was spooled to path
// by this node.
func (n *Node) deliverSnapshot(id GroupID, m *pb.Message, path string) delivery {
	g := n.Group(id)
	if g == nil {
		return dropped
	}
	if d := n.checkSender(g, m); d != delivered {
		if d == toNewer {
			n.removedByPeer(id, g.self)
		}
		return d
	}
	if !g.enqueueSnapshot(m, path) {
		return dropped
	}
	return delivered
}

// checkSender says whether g takes a message from m's sender to m's
// addressee (delivered), or why not.
func (n *Node) checkSender(g *Group, m *pb.Message) delivery {
	conf := g.conf.Load()
	if m.GetTo() != g.self {
		// A removed replica that slept through its removal may still
		// address this node's replica of its time, gone too: tell it,
		// or it campaigns forever in a configuration nobody else has.
		if to := m.GetTo(); NodeOf(to) == NodeOf(g.self) && GenerationOf(to) > GenerationOf(g.self) {
			n.log.Warn().Uint32("group", uint32(g.id)).Uint64("to", to).Uint64("self", g.self).Msg("raft message for a newer replica of this node: this one was removed")
			return toNewer
		}
		if conf.removedFrom(m.GetFrom()) {
			n.log.Warn().Uint32("group", uint32(g.id)).Uint64("from", m.GetFrom()).Uint64("to", m.GetTo()).Msg("raft message refused: the sender is a replica removed from the group")
			return fromRemoved
		}
		n.log.Debug().Uint32("group", uint32(g.id)).Uint64("to", m.GetTo()).Uint64("self", g.self).Msg("raft message refused: addressed to another replica of this node")
		return dropped
	}
	switch from := m.GetFrom(); {
	case conf.Contains(from), conf.blank():
		return delivered
	case conf.removedFrom(from):
		n.log.Warn().Uint32("group", uint32(g.id)).Uint64("from", from).Msg("raft message refused: the sender is a replica removed from the group")
		return fromRemoved
	case conf.supersededBy(from), isLeaderMessage(m) && m.GetTerm() > g.leader.Load().Term:
		// This replica's configuration lags: the group replaced the
		// sender's node's replica it knows by a newer one, or a leader
		// elected since (a higher term than any this replica saw) was
		// added after it. Refusing them would leave it behind for ever
		// (docs/robustness.md, bug 11). A removed replica never sends a
		// higher term: pre-vote keeps a lone campaigner at its own.
		return delivered
	default:
		n.log.Warn().Uint32("group", uint32(g.id)).Uint64("from", from).Msg("raft message refused: sender is not a member of the group")
		return dropped
	}
}

// isLeaderMessage reports whether m is one only a leader sends its
// followers.
func isLeaderMessage(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MessageType_MsgApp, pb.MessageType_MsgHeartbeat, pb.MessageType_MsgSnap:
		return true
	}
	return false
}

// removedByPeer: a peer refused a message of replica of group id as one
// from a replica the group removed. If that is this node's replica, it
// stops (ErrRemoved).
func (n *Node) removedByPeer(id GroupID, replica uint64) {
	if g := n.Group(id); g != nil && g.self == replica {
		g.enqueueControl(func() {
			g.log.Warn().Msg("a member of the group refused this replica's messages as those of a removed replica")
			g.fail(ErrRemoved)
		})
	}
}

func (n *Node) isClosed() bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.closed
}

// reportUnreachable tells group id that a message to peer was lost.
func (n *Node) reportUnreachable(id GroupID, peer uint64) {
	if g := n.Group(id); g != nil {
		g.enqueueReport(func() { g.rn.ReportUnreachable(peer) })
	}
}

// reportSnapshot tells group id how sending a snapshot to peer ended.
func (n *Node) reportSnapshot(id GroupID, peer uint64, ok bool) {
	status := raft.SnapshotFinish
	if !ok {
		status = raft.SnapshotFailure
	}
	if g := n.Group(id); g != nil {
		g.enqueueReport(func() { g.rn.ReportSnapshot(peer, status) })
	}
}

// isPeer says whether node id is in the address book, and not this node.
func (n *Node) isPeer(id uint64) bool {
	_, ok := n.peerAddr(id)
	return ok && id != n.cfg.NodeID
}

// Failed delivers the first error that stopped one of the node's groups (a
// failing Apply, a corrupt entry, ErrStaleLog), or ErrNotAMember. A node
// with a stopped group no longer serves it; the process should exit and be
// looked at.
func (n *Node) Failed() <-chan error { return n.failed }

// reportFailure records err as the node's failure unless one already was.
func (n *Node) reportFailure(err error) {
	select {
	case n.failed <- err:
	default:
	}
}

// fileSize reports the size of the file at path (0 when it cannot be read).
func fileSize(path string) func() float64 {
	return func() float64 {
		st, err := os.Stat(path)
		if err != nil {
			return 0
		}
		return float64(st.Size())
	}
}

// openLog opens group id's view of the write-ahead log and reconciles it
// with the group's checkpointed state (applied index A, term T). The log
// must reach A with the same term there; otherwise (a crash between a
// snapshot install's checkpoint and its log write, a state file restored
// from a backup, a fresh group) it is reset to start after A, which is
// safe because everything up to A is in the state. A log that starts after
// A has lost entries the state lacks: the node refuses to start.
func (n *Node) openLog(id GroupID, gs groupState) (*logStore, error) {
	g := uint32(id)
	a, t := gs.appliedIdx, gs.appliedTm
	known := slices.Contains(n.wal.Groups(), g)
	first, last := n.wal.FirstIndex(g), n.wal.LastIndex(g)
	if known && first > a+1 {
		return nil, fmt.Errorf("raftlog: group %d: the log starts at index %d but the state is checkpointed at %d: entries are missing; restore this node from a peer (docs/operations.md, \"Backup and restore\")", id, first, a)
	}
	consistent := known && last >= a
	if consistent {
		if term, err := n.wal.Term(g, a); err != nil || term != t {
			consistent = false
		}
	}
	hs := n.wal.HardState(g)
	if !consistent {
		if known {
			n.log.Info().Uint32("group", g).Uint64("applied", a).Uint64("log_last", last).
				Msg("log reset to start after the checkpointed state (it did not reach it with the same term)")
		}
		hs = &pb.HardState{Term: new(max(hs.GetTerm(), t)), Vote: new(hs.GetVote()), Commit: new(a)}
		if hs.GetTerm() != n.wal.HardState(g).GetTerm() {
			hs.Vote = new(uint64(0))
		}
		if err := n.lw.write(func(b *wal.Batch) {
			b.SetFirstIndex(g, a, t)
			b.SetHardState(g, hs)
		}); err != nil {
			return nil, fmt.Errorf("raftlog: group %d: reset log: %w", id, err)
		}
		first, last = n.wal.FirstIndex(g), n.wal.LastIndex(g)
	}
	// Raft requires applied <= commit <= last index.
	hs = &pb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(min(max(hs.GetCommit(), a), last))}
	compactTerm, err := n.wal.Term(g, first-1)
	if err != nil {
		return nil, fmt.Errorf("raftlog: group %d: term at %d: %w", id, first-1, err)
	}
	return &logStore{wal: n.wal, group: g, hard: hs, conf: gs.conf, compactIndex: first - 1, compactTerm: compactTerm}, nil
}

// ErrPinMismatch: Pin found another value stored under the name.
var ErrPinMismatch = errors.New("raftlog: pinned value differs")

// Pin stores value under name in state.db the first time, and from then on
// checks that it is the same, so that a setting fixed for a data dir's
// life (the partition count) travels with the state file, into backups too.
// A mismatch is an ErrPinMismatch naming both values.
func (n *Node) Pin(name string, value []byte) error {
	return n.updateState(func(tx *bolt.Tx) error {
		node, err := tx.CreateBucketIfNotExists(bucketNode)
		if err != nil {
			return err
		}
		pins, err := node.CreateBucketIfNotExists(bucketPins)
		if err != nil {
			return err
		}
		if have := pins.Get([]byte(name)); have != nil {
			if !bytes.Equal(have, value) {
				return fmt.Errorf("%w: %s is %q in this data dir, not %q", ErrPinMismatch, name, have, value)
			}
			return nil
		}
		return pins.Put([]byte(name), value)
	})
}

// HasGroup reports whether this node's state holds a replica of group id
// (opened now or not).
func (n *Node) HasGroup(id GroupID) bool {
	var ok bool
	_ = n.db.View(func(tx *bolt.Tx) error {
		ok = tx.Bucket(groupBucketName(id)) != nil
		return nil
	})
	return ok
}

// OpenGroup reopens the replica of group id this node's state holds, as it
// is (whatever its configuration and replica id); ErrNoGroup when it holds
// none.
func (n *Node) OpenGroup(id GroupID, sm StateMachine) (*Group, error) {
	if !n.HasGroup(id) {
		return nil, fmt.Errorf("%w: %d", ErrNoGroup, id)
	}
	return n.addGroup(id, nil, 0, sm)
}
