package leadership

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
)

// Discover finds the cluster's members through the gossip addresses join,
// as a short-lived probe on an ephemeral port of bindHost: it is how a node
// that has no id yet (it is joining) learns where the members' node ports
// are. Members ignore the probe (its id is 0). It returns once it saw at
// least one member, or fails after timeout.
func Discover(join []string, bindHost string, secretKey []byte, timeout time.Duration, logger zerolog.Logger) ([]NodeInfo, error) {
	cfg := DefaultConfig()
	cfg.Self = NodeInfo{NodeAddr: "probe"}
	cfg.BindAddr = net.JoinHostPort(bindHost, "0")
	cfg.SecretKey = secretKey
	cfg.Logger = logger
	m := &Membership{
		cfg:     cfg,
		log:     logger.With().Str("component", "leadership").Logger(),
		meta:    encodeNodeInfo(cfg.Self),
		leaders: table{},
		members: map[uint64]Member{},
		stop:    make(chan struct{}),
	}
	mc, err := m.memberlistConfig()
	if err != nil {
		return nil, err
	}
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	mc.Name = "raftgate-probe-" + hex.EncodeToString(suffix)
	m.queue = &memberlist.TransmitLimitedQueue{NumNodes: m.numAlive, RetransmitMult: cfg.RetransmitMult}
	list, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("leadership: discovery probe: %w", err)
	}
	m.list = list
	defer func() {
		close(m.stop)
		_ = list.Leave(cfg.LeaveTimeout)
		_ = list.Shutdown()
	}()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		if _, err := list.Join(join); err != nil {
			lastErr = err
		}
		if members := m.Members(); len(members) > 0 {
			out := make([]NodeInfo, 0, len(members))
			for _, mem := range members {
				out = append(out, mem.NodeInfo)
			}
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("leadership: no cluster member reached through --join %v within %v: %v", join, timeout, lastErr)
		}
		time.Sleep(cfg.RejoinInterval) // the next join attempt; nothing to wait on
	}
}
