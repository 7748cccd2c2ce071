package leadership

import (
	"fmt"
	"log"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
)

// Listener holds the gossip sockets (TCP and UDP on one address). A node
// binds it before it opens its storage, so that a gossip port in use stops
// the start before anything is written; Start then gossips on it
// (Config.Listener) and owns it.
type Listener struct {
	addr      string
	transport *memberlist.NetTransport
}

// Listen binds host:port for gossip, TCP and UDP.
func Listen(addr string, logger zerolog.Logger) (*Listener, error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: gossip address %q: %v", ErrInvalidConfig, addr, err)
	}
	t, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{host},
		BindPort:  port,
		Logger:    log.New(memberlistLog{log: logger.With().Str("component", "memberlist").Logger()}, "", 0),
	})
	if err != nil {
		return nil, fmt.Errorf("leadership: listen %s: %w", addr, err)
	}
	return &Listener{addr: addr, transport: t}, nil
}

// Close releases a listener that was not handed to Start.
func (l *Listener) Close() error { return l.transport.Shutdown() }
