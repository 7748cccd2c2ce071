package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftgate/raftgate/rpc"
)

// errStreamBroken is the cause of a retry when the stream an attempt was
// sent on broke before its answer came.
var errStreamBroken = errors.New("dispatch stream broken")

// errUnreachable wraps failures to open a stream to a node.
var errUnreachable = errors.New("node unreachable")

// peer is one destination node: a lazily dialled connection and at most one
// live stream, reopened on demand after it breaks.
type peer struct {
	c    *Client
	id   uint64
	addr string
	// inFlight counts attempts on this node, bounded by MaxInFlightPerNode.
	inFlight atomic.Int64

	// mu guards conn, cur, opening and openErr.
	mu   sync.Mutex
	conn *grpc.ClientConn
	cur  *clientStream
	// opening is closed when the open under way ends (nil when none).
	opening chan struct{}
	openErr error
}

func (p *peer) tryAcquire() bool {
	if p.inFlight.Add(1) > int64(p.c.cfg.MaxInFlightPerNode) {
		p.inFlight.Add(-1)
		return false
	}
	p.c.metrics.inFlight.Inc()
	return true
}

func (p *peer) release() {
	p.inFlight.Add(-1)
	p.c.metrics.inFlight.Dec()
}

// stream returns the live stream, opening one if needed. Concurrent callers
// share one open; each stops waiting when its ctx ends.
func (p *peer) stream(ctx context.Context) (*clientStream, error) {
	p.mu.Lock()
	if st := p.cur; st != nil && !st.broken() {
		p.mu.Unlock()
		return st, nil
	}
	if p.opening == nil {
		opening := make(chan struct{})
		if !p.c.spawn(func() { p.open(opening) }) {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		p.opening = opening
	}
	opening := p.opening
	p.mu.Unlock()
	select {
	case <-opening:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.c.ctx.Done():
		return nil, ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.cur; st != nil && !st.broken() {
		return st, nil
	}
	if p.openErr != nil {
		return nil, p.openErr
	}
	return nil, errStreamBroken
}

// open dials (once) and opens a stream; it runs on its own goroutine so that
// no caller's context cuts it short.
func (p *peer) open(opening chan struct{}) {
	st, err := p.openStream()
	p.mu.Lock()
	p.cur, p.openErr, p.opening = st, err, nil
	p.mu.Unlock()
	close(opening)
	if err != nil {
		p.c.log.Debug().Err(err).Uint64("peer", p.id).Msg("opening dispatch stream failed")
		return
	}
	p.c.metrics.opened.Inc()
	if !p.c.spawn(st.sendLoop) || !p.c.spawn(st.recvLoop) {
		st.fail(ErrClosed)
	}
}

func (p *peer) openStream() (*clientStream, error) {
	p.mu.Lock()
	if p.conn == nil {
		conn, err := grpc.NewClient(p.addr, p.c.dialOptions...)
		if err != nil {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: node %d at %s: %w", errUnreachable, p.id, p.addr, err)
		}
		p.conn = conn
	}
	conn := p.conn
	p.mu.Unlock()
	ctx, cancel := context.WithCancel(p.c.ctx)
	w, err := p.openWire(ctx, rpc.NewDispatchClient(conn))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w: node %d at %s: %w", errUnreachable, p.id, p.addr, err)
	}
	return &clientStream{
		peer:    p,
		wire:    w,
		cancel:  cancel,
		sendq:   make(chan *rpc.DispatchRequest, p.c.cfg.MaxInFlightPerNode),
		done:    make(chan struct{}),
		pending: map[uint64]chan *rpc.DispatchResponse{},
	}, nil
}

// openWire opens a batched stream, or a per-message one when the node runs
// a release that does not serve Batches (a rolling upgrade). Every open
// asks again, so a node gets batches once it is upgraded (its restart
// broke the old stream).
func (p *peer) openWire(ctx context.Context, dc rpc.DispatchClient) (clientWire, error) {
	bs, err := dc.Batches(ctx)
	if err != nil {
		return nil, err
	}
	// A server that serves Batches sends its headers at once; one that
	// does not ends the stream with UNIMPLEMENTED instead (no headers), so
	// the choice is made before any request is sent.
	if md, _ := bs.Header(); md != nil {
		return batchClientWire{s: bs}, nil
	}
	if _, err := bs.Recv(); status.Code(err) != codes.Unimplemented {
		return nil, err
	}
	s, err := dc.Stream(ctx)
	if err != nil {
		return nil, err
	}
	p.c.metrics.legacy.Inc()
	p.c.log.Info().Uint64("peer", p.id).Msg("dispatch peer serves no batched stream (an older release): one message per request")
	return &streamClientWire{s: s}, nil
}

// close closes the connection: the client is closing (every stream's
// context is already cancelled), or SetPeers retired this peer (its streams
// break, and their calls are retried on another node).
func (p *peer) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	return p.conn.Close()
}

// clientStream is one open dispatch stream. sendLoop is its only sender and
// recvLoop its only receiver; when either fails the stream is broken: done
// closes and every attempt waiting on it fails at once.
type clientStream struct {
	peer   *peer
	wire   clientWire
	cancel context.CancelFunc
	sendq  chan *rpc.DispatchRequest
	// done is closed when the stream broke; err says why.
	done     chan struct{}
	failOnce sync.Once
	err      error

	// mu guards pending (nil once broken).
	mu      sync.Mutex
	pending map[uint64]chan *rpc.DispatchResponse
}

func (st *clientStream) broken() bool {
	select {
	case <-st.done:
		return true
	default:
		return false
	}
}

// register reserves a fresh random correlation id and the channel its
// answer will arrive on.
func (st *clientStream) register() (uint64, chan *rpc.DispatchResponse, bool) {
	ch := make(chan *rpc.DispatchResponse, 1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.pending == nil {
		return 0, nil, false
	}
	for {
		id := rand.Uint64()
		if _, taken := st.pending[id]; !taken {
			st.pending[id] = ch
			return id, ch, true
		}
	}
}

// abandon forgets a correlation id; a late answer for it is dropped.
func (st *clientStream) abandon(id uint64) {
	st.mu.Lock()
	delete(st.pending, id)
	st.mu.Unlock()
}

// sendLoop sends the first queued request together with whatever else is
// queued by then, up to maxFrameRequests: under load one frame carries
// many requests, and an idle stream sends a lone request at once.
func (st *clientStream) sendLoop() {
	batch := make([]*rpc.DispatchRequest, 0, maxFrameRequests)
	for {
		select {
		case req := <-st.sendq:
			batch = st.drain(append(batch[:0], req))
			err := st.wire.send(batch)
			clear(batch)
			if err != nil {
				st.fail(fmt.Errorf("%w: send: %w", errStreamBroken, err))
				return
			}
		case <-st.done:
			return
		}
	}
}

// drain appends what is queued to batch, up to maxFrameRequests. Finding
// nothing queued while other attempts are under way on this node, it
// yields the processor once first (as gRPC's own writer does for a small
// write): callers that are runnable, typically woken by answers of the
// last frame, queue their next requests meanwhile and share this frame
// instead of each waking the loop for one of its own. A lone caller does
// not yield: nobody could join.
func (st *clientStream) drain(batch []*rpc.DispatchRequest) []*rpc.DispatchRequest {
	yielded := false
	for len(batch) < maxFrameRequests {
		select {
		case req := <-st.sendq:
			batch = append(batch, req)
		default:
			if yielded || len(batch) > 1 || st.peer.inFlight.Load() <= 1 {
				return batch
			}
			yielded = true
			runtime.Gosched()
		}
	}
	return batch
}

// recvLoop hands every answer of a frame to the attempt waiting for its
// correlation id, and drops answers nobody waits for.
func (st *clientStream) recvLoop() {
	var waiters []chan *rpc.DispatchResponse
	for {
		resps, err := st.wire.recv()
		if err != nil {
			st.fail(fmt.Errorf("%w: node %d: %w", errStreamBroken, st.peer.id, err))
			return
		}
		waiters = waiters[:0]
		st.mu.Lock()
		for _, resp := range resps {
			waiters = append(waiters, st.pending[resp.CorrelationId])
			delete(st.pending, resp.CorrelationId)
		}
		st.mu.Unlock()
		for i, ch := range waiters {
			if ch == nil {
				st.peer.c.metrics.dropped.Inc()
				continue
			}
			ch <- resps[i] // buffered, one answer per id
		}
		clear(waiters)
	}
}

// fail marks the stream broken, once: waiting attempts fail at once and the
// next attempt on this node opens a new stream.
func (st *clientStream) fail(err error) {
	st.failOnce.Do(func() {
		st.mu.Lock()
		st.err = err
		st.pending = nil
		st.mu.Unlock()
		close(st.done)
		st.cancel()
		p := st.peer
		p.mu.Lock()
		if p.cur == st {
			p.cur = nil
		}
		p.mu.Unlock()
		if p.c.ctx.Err() == nil {
			p.c.metrics.broken.Inc()
			p.c.log.Debug().Err(err).Uint64("peer", p.id).Msg("dispatch stream broke")
		}
	})
}

// failure returns why the stream broke.
func (st *clientStream) failure() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err == nil {
		return errStreamBroken
	}
	return st.err
}
