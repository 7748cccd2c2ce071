package freeport

import (
	"fmt"
	"net"
	"testing"
)

// TestPortIsFreeFreshAndInShare: every port is bindable for TCP and UDP,
// never handed out twice, and inside the share when the kernel's
// ephemeral range starts above it.
func TestPortIsFreeFreshAndInShare(t *testing.T) {
	s := Share{Lo: 23000, Hi: 23050}
	handedOut.Lock()
	clear(handedOut.ports) // a previous -count run handed out most of s
	handedOut.Unlock()
	inShare := ephemeralLow() >= s.Hi
	seen := map[int]bool{}
	for range 40 {
		p := Port(t, s)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if inShare && (p < s.Lo || p >= s.Hi) {
			t.Fatalf("port %d outside [%d, %d) though the ephemeral range starts at %d", p, s.Lo, s.Hi, ephemeralLow())
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d not free for TCP: %v", p, err)
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		l.Close()
		if err != nil {
			t.Fatalf("port %d not free for UDP: %v", p, err)
		}
		u.Close()
	}
}
