package test

import (
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

// nodeProxy carries every connection into node `to` (Raft transport,
// dispatch, membership calls). Every node dials `to` through it: the
// cluster record holds one address per node, which every node then dials,
// so the proxy cannot be told by address who dials. It asks the kernel
// instead (dialler): the process that owns the connection's other end.
// forward gates the dialler's bytes to `to`, backward the replies, each of
// the ordered pair's link.
type nodeProxy struct {
	to     int
	lis    net.Listener
	target string
	net    *faultNet
	done   chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newNodeProxy(t testing.TB, f *faultNet, to int, target string) *nodeProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &nodeProxy{to: to, lis: lis, target: target, net: f, done: make(chan struct{}),
		conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p
}

func (p *nodeProxy) addr() string { return p.lis.Addr().String() }

func (p *nodeProxy) acceptLoop() {
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

func (p *nodeProxy) track(c net.Conn, add bool) bool {
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

func (p *nodeProxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	from := p.net.dialler(client)
	if from == 0 {
		// Gone already (a dialler killed while connecting), or a node
		// started a moment ago: closing is safe, a live dialler dials
		// again, and nothing passes a cut unseen.
		p.net.unidentified.Add(1)
		return
	}
	l := p.net.links[[2]int{from, p.to}]
	// Even the connection attempt waits for the link: a partitioned peer
	// cannot be reached at all.
	if !l.forward.wait(p.done) {
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
	go func() { defer wg.Done(); p.pipe(server, client, l.forward) }()
	go func() { defer wg.Done(); p.pipe(client, server, l.backward) }()
	wg.Wait()
}

// pipe copies src to dst while g is open.
func (p *nodeProxy) pipe(dst, src net.Conn, g *gate) {
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

func (p *nodeProxy) close() {
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

// link is the two directions of one ordered pair of nodes.
type link struct{ forward, backward *gate }

// faultNet is one proxy per node and a link per ordered pair of nodes, so
// a test can cut any direction between any two nodes. Gossip does not go
// through it.
type faultNet struct {
	proxies map[int]*nodeProxy
	links   map[[2]int]*link

	// unidentified counts connections closed because no node's process
	// held their other end.
	unidentified atomic.Int64

	mu   sync.Mutex
	pids map[int]int // process id -> node id, kept by setPID
}

// newFaultNet builds a proxy in front of each of the given nodes;
// nodeAddr returns the real listen address of a node.
func newFaultNet(t testing.TB, ids []int, nodeAddr func(id int) string) *faultNet {
	f := &faultNet{proxies: map[int]*nodeProxy{}, links: map[[2]int]*link{}, pids: map[int]int{}}
	for _, from := range ids {
		f.proxies[from] = newNodeProxy(t, f, from, nodeAddr(from))
		for _, to := range ids {
			if from != to {
				f.links[[2]int{from, to}] = &link{newGate(), newGate()}
			}
		}
	}
	t.Cleanup(f.close)
	return f
}

// setPID records that node id runs as process pid (at each start).
func (f *faultNet) setPID(id, pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, n := range f.pids {
		if n == id {
			delete(f.pids, p)
		}
	}
	f.pids[pid] = id
}

// dialler returns the node whose process owns the other end of c, an
// accepted loopback connection, or 0: it finds the socket in
// /proc/net/tcp (local port = c's remote port, remote port = c's local
// port) and the process holding its inode among the nodes'.
func (f *faultNet) dialler(c net.Conn) int {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	want := fmt.Sprintf(":%04X", remote.Port)
	peer := fmt.Sprintf(":%04X", local.Port)
	inode := ""
	for _, line := range strings.Split(string(b), "\n")[1:] {
		fs := strings.Fields(line)
		if len(fs) > 9 && strings.HasSuffix(fs[1], want) && strings.HasSuffix(fs[2], peer) {
			inode = fs[9]
			break
		}
	}
	if inode == "" {
		return 0
	}
	f.mu.Lock()
	pids := maps.Clone(f.pids)
	f.mu.Unlock()
	sock := "socket:[" + inode + "]"
	for pid, id := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == sock {
				return id
			}
		}
	}
	return 0
}

// initialCluster is the --initial-cluster of every node: each node's
// proxy.
func (f *faultNet) initialCluster(ids []int) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%d=%s", id, f.proxies[id].addr()))
	}
	return strings.Join(parts, ",")
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
	for _, p := range f.proxies {
		p.close()
	}
}
