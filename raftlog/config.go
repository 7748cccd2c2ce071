package raftlog

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
)

// ErrInvalidConfig wraps every Validate failure.
var ErrInvalidConfig = errors.New("raftlog: invalid config")

// DefaultLeaderBalanceTicks is a leader balancing interval for
// Config.LeaderBalanceTicks: 5 s at the default 50 ms tick, ten election
// timeouts, so that a hand-off that fails is long over before the next.
const DefaultLeaderBalanceTicks = 100

// DefaultConfig returns a Config with production defaults: a 50 ms tick,
// elections after 10 ticks (a dead leader is replaced in 0.5–1 s),
// heartbeats every tick, no leader balancing.
func DefaultConfig() Config {
	return Config{
		TickInterval:              50 * time.Millisecond,
		ElectionTicks:             10,
		HeartbeatTicks:            1,
		SnapshotEntries:           10000,
		SnapshotCatchUpEntries:    2000,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 64 << 20,
		IdleCompactAfter:          10 * time.Second,
		CheckpointInterval:        100 * time.Millisecond,
		CheckpointEntries:         10000,
		WALSegmentBytes:           64 << 20,
		PeerQueueMessages:         16384,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.TickInterval == 0 {
		c.TickInterval = d.TickInterval
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = d.ElectionTicks
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = d.HeartbeatTicks
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = d.SnapshotEntries
	}
	if c.SnapshotCatchUpEntries == 0 {
		c.SnapshotCatchUpEntries = min(d.SnapshotCatchUpEntries, c.SnapshotEntries/2)
	}
	if c.SnapshotStreams == 0 {
		c.SnapshotStreams = DefaultSnapshotStreams
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = d.MaxSizePerMsg
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = d.MaxInflightMsgs
	}
	if c.MaxUncommittedEntriesSize == 0 {
		c.MaxUncommittedEntriesSize = d.MaxUncommittedEntriesSize
	}
	if c.IdleCompactAfter == 0 {
		c.IdleCompactAfter = d.IdleCompactAfter
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = d.CheckpointInterval
	}
	if c.CheckpointEntries == 0 {
		c.CheckpointEntries = d.CheckpointEntries
	}
	if c.WALSegmentBytes == 0 {
		c.WALSegmentBytes = d.WALSegmentBytes
	}
	if c.PeerQueueMessages == 0 {
		c.PeerQueueMessages = d.PeerQueueMessages
	}
	return c
}

// Validate names the first bad field. Zero fields are valid: they take
// DefaultConfig's values.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field, why string) error {
		return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, why)
	}
	switch {
	case c.NodeID == 0 || c.NodeID > maxNodeID:
		return bad("NodeID", "must be non-zero and fit in 32 bits")
	case c.DataDir == "":
		return bad("DataDir", "must be set")
	case len(c.Peers) == 0:
		return bad("Peers", "must list every voter")
	case c.Peers[c.NodeID] == "":
		return bad("Peers", fmt.Sprintf("has no address for NodeID %d", c.NodeID))
	case c.TickInterval < time.Millisecond:
		return bad("TickInterval", "must be at least 1ms")
	case c.HeartbeatTicks < 1:
		return bad("HeartbeatTicks", "must be positive")
	case c.ElectionTicks <= c.HeartbeatTicks:
		return bad("ElectionTicks", "must exceed HeartbeatTicks")
	case c.SnapshotCatchUpEntries >= c.SnapshotEntries:
		return bad("SnapshotCatchUpEntries", "must be below SnapshotEntries")
	case c.MaxInflightMsgs < 1:
		return bad("MaxInflightMsgs", "must be positive")
	case c.MaxUncommittedEntriesSize < c.MaxSizePerMsg:
		return bad("MaxUncommittedEntriesSize", "must be at least MaxSizePerMsg")
	case c.CheckpointInterval < 0 || c.CheckpointEntries < 0:
		return bad("Checkpoint", "interval and entries must not be negative")
	case c.WALSegmentBytes < 64<<10:
		return bad("WALSegmentBytes", "must be at least 64 KiB")
	case c.SnapshotStreams < 0:
		return bad("SnapshotStreams", "must not be negative (zero is the default)")
	case c.PeerQueueMessages < 16:
		return bad("PeerQueueMessages", "must be at least 16")
	case c.LeaderBalanceTicks < 0:
		return bad("LeaderBalanceTicks", "must not be negative (zero turns balancing off)")
	case c.LeaderBalanceTicks > 0 && c.LeaderBalanceTicks <= c.ElectionTicks:
		return bad("LeaderBalanceTicks", "must exceed ElectionTicks (a hand-off may take that long)")
	}
	for id, addr := range c.Peers {
		if id == 0 || id > maxNodeID {
			return bad("Peers", fmt.Sprintf("has id %d (ids are non-zero and fit in 32 bits)", id))
		}
		if addr == "" {
			return bad("Peers", fmt.Sprintf("has no address for %d", id))
		}
	}
	return nil
}

// raftConfig is the go.etcd.io/raft configuration of one group.
func (c Config) raftConfig(replica uint64, st raft.Storage, applied uint64, lg raft.Logger) *raft.Config {
	return &raft.Config{
		ID:                        replica,
		ElectionTick:              c.ElectionTicks,
		HeartbeatTick:             c.HeartbeatTicks,
		Storage:                   st,
		Applied:                   applied,
		AsyncStorageWrites:        true,
		MaxSizePerMsg:             c.MaxSizePerMsg,
		MaxCommittedSizePerReady:  c.MaxUncommittedEntriesSize,
		MaxUncommittedEntriesSize: c.MaxUncommittedEntriesSize,
		MaxInflightMsgs:           c.MaxInflightMsgs,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		DisableProposalForwarding: true,
		// A leader that applies its own removal (or demotion) stops
		// leading at once; the API transfers leadership before such a
		// change, this is the backstop.
		StepDownOnRemoval: true,
		Logger:            lg,
	}
}
