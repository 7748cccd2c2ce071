package test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// gate holds back one direction of a proxied connection while blocked.
// Blocked bytes stay in the kernel's socket buffers (the proxy stops
// reading), so a partition behaves like a silent network, not like a reset:
// TCP flow control stalls the sender, and after healing the held bytes flow
// on unless a keepalive gave up on the connection meanwhile.
type gate struct {
	mu      sync.Mutex
	blocked bool
	open    chan struct{} // closed while not blocked
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) block() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.blocked {
		g.blocked = true
		g.open = make(chan struct{})
	}
}

func (g *gate) unblock() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.blocked {
		g.blocked = false
		close(g.open)
	}
}

// wait returns true once the gate is open, false if done closes first.
func (g *gate) wait(done <-chan struct{}) bool {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return true
	case <-done:
		return false
	}
}

// linkProxy carries every connection node `from` opens to node `to`
// (Raft transport and dispatch). forward gates from→to bytes, backward the
// replies.
type linkProxy struct {
	from, to          int
	lis               net.Listener
	target            string
	forward, backward *gate
	done              chan struct{}
	wg                sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newLinkProxy(t testing.TB, from, to int, target string) *linkProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &linkProxy{from: from, to: to, lis: lis, target: target,
		forward: newGate(), backward: newGate(), done: make(chan struct{}),
		conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p
}

func (p *linkProxy) addr() string { return p.lis.Addr().String() }

func (p *linkProxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *linkProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		select {
		case <-p.done:
			return false
		default:
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *linkProxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	// Even the connection attempt waits for the link: a partitioned peer
	// cannot be reached at all.
	if !p.forward.wait(p.done) {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(client, true) || !p.track(server, true) {
		return
	}
	defer p.track(client, false)
	defer p.track(server, false)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, p.forward) }()
	go func() { defer wg.Done(); p.pipe(client, server, p.backward) }()
	wg.Wait()
}

// pipe copies src to dst while g is open.
func (p *linkProxy) pipe(dst, src net.Conn, g *gate) {
	defer func() {
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		if !g.wait(p.done) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !g.wait(p.done) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
				dst.Close()
			}
			return
		}
	}
}

func (p *linkProxy) close() {
	p.mu.Lock()
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.lis.Close()
	p.wg.Wait()
}

// faultNet is one proxy per ordered pair of nodes, so a test can cut any
// direction between any two nodes. Gossip does not go through it.
type faultNet struct {
	links map[[2]int]*linkProxy
}

// newFaultNet builds proxies between every pair of the given node ids;
// nodeAddr returns the real listen address of a node.
func newFaultNet(t testing.TB, ids []int, nodeAddr func(id int) string) *faultNet {
	f := &faultNet{links: map[[2]int]*linkProxy{}}
	for _, from := range ids {
		for _, to := range ids {
			if from != to {
				f.links[[2]int{from, to}] = newLinkProxy(t, from, to, nodeAddr(to))
			}
		}
	}
	t.Cleanup(f.close)
	return f
}

// initialCluster is node from's --initial-cluster: its own real address,
// and for every peer the proxy of the link from→peer.
func (f *faultNet) initialCluster(from int, ids []int, nodeAddr func(id int) string) string {
	s := ""
	for i, to := range ids {
		if i > 0 {
			s += ","
		}
		addr := nodeAddr(to)
		if to != from {
			addr = f.links[[2]int{from, to}].addr()
		}
		s += fmt.Sprintf("%d=%s", to, addr)
	}
	return s
}

// cut stops all bytes travelling from node a to node b (both a's requests
// to b and a's replies to b's requests).
func (f *faultNet) cut(a, b int) {
	f.links[[2]int{a, b}].forward.block()
	f.links[[2]int{b, a}].backward.block()
}

// isolate cuts node id off from every other node, both directions.
func (f *faultNet) isolate(id int) {
	for k := range f.links {
		if k[0] == id {
			f.cut(k[0], k[1])
			f.cut(k[1], k[0])
		}
	}
}

// heal reopens every link.
func (f *faultNet) heal() {
	for _, l := range f.links {
		l.forward.unblock()
		l.backward.unblock()
	}
}

func (f *faultNet) close() {
	for _, l := range f.links {
		l.close()
	}
}
