package dispatch

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/rpc"
)

// outSlack is room in a stream's answer queue beyond its in-flight bound,
// for answers that hold no slot (OVERLOADED, shutting down).
const outSlack = 256

// serverStream serves one dispatch stream. Its run goroutine is the only
// sender; a receive goroutine reads requests and starts one goroutine per
// request.
type serverStream struct {
	s   *Server
	ss  rpc.Dispatch_StreamServer
	log zerolog.Logger
	// ctx is the parent of every request's context; cancelled when the
	// stream ends or the server closes.
	ctx    context.Context
	cancel context.CancelFunc

	// out queues answers for the sender.
	out chan *rpc.DispatchResponse
	// closing is closed by shutdown (server Close).
	closing   chan struct{}
	closeOnce sync.Once
	// done is closed when run returns, releasing goroutines that queue
	// answers nobody will send.
	done chan struct{}
	// recvDone is closed when the receive goroutine stops; recvErr and
	// received are final then.
	recvDone chan struct{}
	recvErr  error
	received int

	// mu guards calls, inFlight and shuttingDown.
	mu           sync.Mutex
	calls        map[*serverCall]struct{}
	inFlight     int
	shuttingDown bool
}

// serverCall is one request being handled. Exactly one answer is sent for
// it: whoever flips answered first (the handler, or shutdown) sends it.
type serverCall struct {
	corr     uint64
	op       string
	start    time.Time
	answered atomic.Bool
}

func newServerStream(s *Server, ss rpc.Dispatch_StreamServer) *serverStream {
	ctx, cancel := context.WithCancel(ss.Context())
	return &serverStream{
		s:        s,
		ss:       ss,
		log:      s.log,
		ctx:      ctx,
		cancel:   cancel,
		out:      make(chan *rpc.DispatchResponse, s.cfg.MaxInFlightPerStream+outSlack),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		recvDone: make(chan struct{}),
		calls:    map[*serverCall]struct{}{},
	}
}

func (st *serverStream) shutdown() {
	st.closeOnce.Do(func() { close(st.closing) })
}

// run sends answers until the client half-closes and everything it sent is
// answered, the stream breaks, or the server closes.
func (st *serverStream) run() error {
	st.s.wg.Add(1)
	go st.receive()
	defer close(st.done)
	defer st.cancel() // runs first: request contexts end before done closes
	sent := 0
	recvDone := st.recvDone
	for {
		select {
		case resp := <-st.out:
			n, err := st.sendBatch(resp)
			sent += n
			if err != nil {
				st.log.Debug().Err(err).Msg("dispatch stream send failed")
				return err
			}
		case <-recvDone:
			if !errors.Is(st.recvErr, io.EOF) {
				st.log.Debug().Err(st.recvErr).Msg("dispatch stream broke")
				return st.recvErr
			}
			recvDone = nil // half-closed: answer what is in flight, then end
		case <-st.closing:
			return st.failAll()
		}
		if recvDone == nil && sent == st.received {
			return nil
		}
	}
}

// sendBatch sends first and whatever else is queued, up to MaxSendBatch, so
// that one wake-up writes many answers (gRPC coalesces them into few writes).
func (st *serverStream) sendBatch(first *rpc.DispatchResponse) (int, error) {
	if err := st.send(first); err != nil {
		return 0, err
	}
	n := 1
	for n < st.s.cfg.MaxSendBatch {
		select {
		case resp := <-st.out:
			if err := st.send(resp); err != nil {
				return n, err
			}
			n++
		default:
			return n, nil
		}
	}
	return n, nil
}

// send writes one answer; nil stands for a request whose caller gave up.
func (st *serverStream) send(resp *rpc.DispatchResponse) error {
	if resp == nil {
		return nil
	}
	return st.ss.Send(resp)
}

// failAll answers every unanswered call with LOST_LEADERSHIP after sending
// the answers already queued. The deferred cancel in run then ends the
// requests' contexts.
func (st *serverStream) failAll() error {
	st.mu.Lock()
	st.shuttingDown = true
	failed := make([]*rpc.DispatchResponse, 0, len(st.calls))
	for c := range st.calls {
		if c.answered.CompareAndSwap(false, true) {
			resp := errorResponse(rpc.ErrLostLeadership)
			resp.CorrelationId = c.corr
			st.count(c, resp)
			failed = append(failed, resp)
		}
	}
	st.mu.Unlock()
	for {
		select {
		case resp := <-st.out:
			if err := st.send(resp); err != nil {
				return err
			}
			continue
		default:
		}
		break
	}
	for _, resp := range failed {
		if err := st.ss.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

func (st *serverStream) receive() {
	defer st.s.wg.Done()
	defer close(st.recvDone)
	for {
		req, err := st.ss.Recv()
		if err != nil {
			st.recvErr = err
			return
		}
		st.received++
		st.accept(req)
	}
}

// accept starts handling one request, or answers at once when the stream
// is shutting down or an in-flight bound is reached.
func (st *serverStream) accept(req *rpc.DispatchRequest) {
	call := &serverCall{corr: req.CorrelationId, op: opOf(req), start: time.Now()}
	st.mu.Lock()
	switch {
	case st.shuttingDown:
		st.mu.Unlock()
		st.answer(call, errorResponse(rpc.ErrLostLeadership))
		return
	case st.inFlight >= st.s.cfg.MaxInFlightPerStream || !st.s.acquire():
		st.mu.Unlock()
		st.s.metrics.overloaded.Inc()
		st.answer(call, errorResponse(rpc.ErrOverloaded))
		return
	}
	st.inFlight++
	st.calls[call] = struct{}{}
	st.s.wg.Add(1)
	st.mu.Unlock()
	go st.handle(call, req)
}

func (st *serverStream) handle(call *serverCall, req *rpc.DispatchRequest) {
	defer st.s.wg.Done()
	ctx, cancel := st.ctx, context.CancelFunc(func() {})
	if req.TimeoutMs > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
	}
	resp := execute(ctx, st.s.backend, req)
	if resp.GetError() != nil && req.TimeoutMs > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && st.ctx.Err() == nil {
		// The caller gave up at this deadline and waits for no answer; an
		// error sent now could overtake its own timer and be mistaken for
		// the request's outcome.
		resp = nil
	}
	cancel()
	st.answer(call, resp)
	st.mu.Lock()
	delete(st.calls, call)
	st.inFlight--
	st.mu.Unlock()
	st.s.release()
}

// answer queues resp for call unless the call was answered already. A nil
// resp is queued too (the sender counts it as answered and sends nothing).
func (st *serverStream) answer(call *serverCall, resp *rpc.DispatchResponse) {
	if !call.answered.CompareAndSwap(false, true) {
		return
	}
	if resp != nil {
		resp.CorrelationId = call.corr
	}
	st.count(call, resp)
	select {
	case st.out <- resp:
	case <-st.done:
	}
}

func (st *serverStream) count(call *serverCall, resp *rpc.DispatchResponse) {
	code := "ok"
	switch e := resp.GetError(); {
	case resp == nil:
		code = "expired"
	case e != nil:
		// Label values are lower case throughout: not_leader, not NOT_LEADER.
		code = strings.ToLower(e.Code.String())
	}
	st.s.metrics.requests.WithLabelValues(call.op, code).Inc()
	st.s.metrics.seconds.WithLabelValues(call.op).Observe(time.Since(call.start).Seconds())
}
