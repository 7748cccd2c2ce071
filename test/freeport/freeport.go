package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// Shares of the ports below the ephemeral range, one per test package that
// starts servers (bench scripts use 21000-21999).
var (
	E2E    = Share{22000, 27000} // package test: real raftgate processes
	Cmd    = Share{27000, 28500} // package cmd/raftgate: in-process nodes
	Server = Share{28500, 30500} // package server: in-process nodes
	Client = Share{30500, 32000} // package ingress/client: in-process nodes
)

// Share is a port range [Lo, Hi).
type Share struct{ Lo, Hi int }

// handedOut remembers every port returned in this process: the kernel may
// offer a port again as soon as its probe closes, and two servers of one
// cluster must never get the same port.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Port returns a port on 127.0.0.1 from s that is free for TCP and UDP
// (gossip needs both) at the time of the call and was not returned before.
// When the kernel's ephemeral range overlaps s, it probes with :0 instead.
func Port(tb testing.TB, s Share) int {
	tb.Helper()
	port, err := Pick(s)
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// Pick is Port for code without a testing.TB (a TestMain).
func Pick(s Share) (int, error) {
	lo, hi := s.Lo, s.Hi
	if ephemeralLow() < hi {
		lo, hi = 0, 0
	}
	for range 500 {
		port := 0
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		port = l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		handedOut.Lock()
		fresh := !handedOut.ports[port]
		handedOut.ports[port] = true
		handedOut.Unlock()
		if fresh {
			return port, nil
		}
	}
	return 0, errors.New("freeport: no free TCP+UDP port found")
}

// Addr is Port as a "127.0.0.1:port" address.
func Addr(tb testing.TB, s Share) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Port(tb, s))
}

// ephemeralLow is the first port of the kernel's ephemeral range (0 when
// unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var low int
	if _, err := fmt.Sscan(string(b), &low); err != nil {
		return 0
	}
	return low
}
