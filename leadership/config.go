package leadership

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/rs/zerolog"
)

// Config configures a Membership: DefaultConfig is a LAN's profile,
// DefaultLocalConfig one host's (tests). Self is required; any other zero
// field takes DefaultConfig's value (BindAddr: the Listener's address when
// one is given).
type Config struct {
	// Self is what this node advertises. ID and NodeAddr are required.
	Self NodeInfo
	// BindAddr is the gossip host:port, used for both TCP and UDP.
	BindAddr string
	// Listener, when set, is BindAddr already bound (Listen); Start owns it
	// from then on, and closes it if it fails.
	Listener *Listener
	// AdvertiseAddr is the ip:port others reach gossip at, when it differs
	// from BindAddr (NAT). Optional.
	AdvertiseAddr string
	// Join lists gossip addresses of other nodes. Start tries them once and
	// keeps retrying those not alive in the background, every RejoinInterval.
	Join []string
	// SecretKey encrypts gossip (AES, 16, 24 or 32 bytes). Optional; every
	// node of a cluster needs the same key.
	SecretKey []byte
	// Voters lists the node ids of the cluster (--initial-cluster). A node
	// that gossips with another id is not listed as a member, and gossiped
	// leader entries naming another leader are dropped; each such node is
	// logged once. Until membership changes exist, only the voters belong
	// to the cluster. Empty: every node seen is a member.
	Voters []uint64
	// Logger receives this package's logs and memberlist's.
	Logger zerolog.Logger

	// Gossip timing, passed to memberlist.
	GossipInterval   time.Duration
	ProbeInterval    time.Duration
	ProbeTimeout     time.Duration
	PushPullInterval time.Duration
	// SuspicionMult scales how long a suspected node has to refute before
	// it is declared dead.
	SuspicionMult int
	// RetransmitMult scales how many times a broadcast is retransmitted.
	RetransmitMult int
	// TCPTimeout bounds TCP exchanges (push/pull, join).
	TCPTimeout time.Duration
	// DeadNodeReclaimTime lets a node that restarted on another address take
	// its name back after this long.
	DeadNodeReclaimTime time.Duration
	// RejoinInterval is how often join addresses that are not alive members
	// are joined again (heals a cluster whose members all timed out).
	RejoinInterval time.Duration
	// LeaveTimeout bounds the leave broadcast in Close.
	LeaveTimeout time.Duration
}

// DefaultConfig returns a profile for a LAN: failures are noticed within a
// few seconds and table changes spread within a few hundred milliseconds.
func DefaultConfig() Config {
	return Config{
		BindAddr:            "0.0.0.0:7946",
		Logger:              zerolog.Nop(),
		GossipInterval:      100 * time.Millisecond,
		ProbeInterval:       time.Second,
		ProbeTimeout:        500 * time.Millisecond,
		PushPullInterval:    15 * time.Second,
		SuspicionMult:       4,
		RetransmitMult:      4,
		TCPTimeout:          5 * time.Second,
		DeadNodeReclaimTime: 10 * time.Second,
		RejoinInterval:      10 * time.Second,
		LeaveTimeout:        time.Second,
	}
}

// DefaultLocalConfig returns a fast profile for nodes on one host
// (127.0.0.1 tests, `raftgate dev`).
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.BindAddr = "127.0.0.1:7946"
	c.GossipInterval = 20 * time.Millisecond
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.PushPullInterval = time.Second
	c.SuspicionMult = 3
	c.RetransmitMult = 3
	c.TCPTimeout = time.Second
	c.DeadNodeReclaimTime = time.Second
	c.RejoinInterval = time.Second
	c.LeaveTimeout = 500 * time.Millisecond
	return c
}

// ErrInvalidConfig is wrapped by Validate's errors.
var ErrInvalidConfig = errors.New("leadership: invalid config")

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
		if c.Listener != nil {
			c.BindAddr = c.Listener.addr
		}
	}
	for _, f := range []struct{ v, d *time.Duration }{
		{&c.GossipInterval, &d.GossipInterval}, {&c.ProbeInterval, &d.ProbeInterval},
		{&c.ProbeTimeout, &d.ProbeTimeout}, {&c.PushPullInterval, &d.PushPullInterval},
		{&c.TCPTimeout, &d.TCPTimeout}, {&c.DeadNodeReclaimTime, &d.DeadNodeReclaimTime},
		{&c.RejoinInterval, &d.RejoinInterval}, {&c.LeaveTimeout, &d.LeaveTimeout},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if c.SuspicionMult == 0 {
		c.SuspicionMult = d.SuspicionMult
	}
	if c.RetransmitMult == 0 {
		c.RetransmitMult = d.RetransmitMult
	}
	return c
}

// Validate names the first bad field (after zero fields took their
// defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.Self.ID == 0 {
		return bad("Self.ID must be > 0")
	}
	if c.Self.NodeAddr == "" {
		return bad("Self.NodeAddr is required")
	}
	if len(c.Voters) > 0 && !slices.Contains(c.Voters, c.Self.ID) {
		return bad("Self.ID %d is not one of Voters %v", c.Self.ID, c.Voters)
	}
	if c.Listener != nil && c.Listener.addr != c.BindAddr {
		return bad("Listener is bound to %s, BindAddr is %s", c.Listener.addr, c.BindAddr)
	}
	if n := len(encodeNodeInfo(c.Self)); n > metaMaxSize {
		return bad("Self addresses take %d bytes of node metadata, limit %d", n, metaMaxSize)
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		return bad("BindAddr %q: %v", c.BindAddr, err)
	}
	if c.AdvertiseAddr != "" {
		host, _, err := splitHostPort(c.AdvertiseAddr)
		if err != nil {
			return bad("AdvertiseAddr %q: %v", c.AdvertiseAddr, err)
		}
		if net.ParseIP(host) == nil {
			return bad("AdvertiseAddr %q: host must be an IP address", c.AdvertiseAddr)
		}
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return bad("SecretKey must be 16, 24 or 32 bytes, not %d", len(c.SecretKey))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"GossipInterval", c.GossipInterval}, {"ProbeInterval", c.ProbeInterval},
		{"ProbeTimeout", c.ProbeTimeout}, {"PushPullInterval", c.PushPullInterval},
		{"TCPTimeout", c.TCPTimeout}, {"RejoinInterval", c.RejoinInterval},
		{"LeaveTimeout", c.LeaveTimeout},
	} {
		if f.d <= 0 {
			return bad("%s must be > 0", f.name)
		}
	}
	if c.ProbeTimeout >= c.ProbeInterval {
		return bad("ProbeTimeout must be < ProbeInterval")
	}
	if c.SuspicionMult < 1 || c.RetransmitMult < 1 {
		return bad("SuspicionMult and RetransmitMult must be >= 1")
	}
	return nil
}

// splitHostPort splits host:port with a numeric port.
func splitHostPort(addr string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", portText)
	}
	return host, port, nil
}
