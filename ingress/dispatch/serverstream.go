package dispatch

import (
	"context"
	"errors"
	"io"
	"runtime"
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
	s    *Server
	wire serverWire
	log  zerolog.Logger
	// ctx is the parent of every request's context; cancelled when the
	// stream ends or the server closes.
	ctx    context.Context
	cancel context.CancelFunc

	// out queues answers for the sender.
	out chan *rpc.DispatchResponse
	// batch holds the answers of one wake-up of the sender (run only).
	batch []*rpc.DispatchResponse
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

func newServerStream(streamCtx context.Context, s *Server, w serverWire) *serverStream {
	ctx, cancel := context.WithCancel(streamCtx)
	return &serverStream{
		s:        s,
		wire:     w,
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
	defer close(st.done)
	defer st.cancel() // runs first: request contexts end before done closes
	if err := st.wire.accepted(); err != nil {
		return err
	}
	st.s.wg.Add(1)
	go st.receive()
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

// sendBatch sends first and whatever else is queued, up to MaxSendBatch
// answers, so that one wake-up writes many answers: in one frame on
// Batches, in messages gRPC coalesces into few writes on Stream. It returns
// how many answers it took from the queue.
func (st *serverStream) sendBatch(first *rpc.DispatchResponse) (int, error) {
	st.batch = appendAnswer(st.batch[:0], first)
	n := 1
	yielded := false
drain:
	for n < st.s.cfg.MaxSendBatch {
		select {
		case resp := <-st.out:
			st.batch = appendAnswer(st.batch, resp)
			n++
		default:
			// Finding nothing more while other calls are being handled,
			// yield once (as the client's drain does): handlers that are
			// about to answer join this frame.
			if yielded || n > 1 || !st.othersInFlight() {
				break drain
			}
			yielded = true
			runtime.Gosched()
		}
	}
	err := st.wire.send(st.batch)
	clear(st.batch)
	return n, err
}

// othersInFlight reports whether calls other than the one just answered
// are being handled (that one may not have left the count yet).
func (st *serverStream) othersInFlight() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.inFlight > 1
}

// appendAnswer appends resp unless it is nil, which stands for a request
// whose caller gave up: it counts as answered and nothing is sent.
func appendAnswer(batch []*rpc.DispatchResponse, resp *rpc.DispatchResponse) []*rpc.DispatchResponse {
	if resp == nil {
		return batch
	}
	return append(batch, resp)
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
	var queued []*rpc.DispatchResponse
	for {
		select {
		case resp := <-st.out:
			queued = appendAnswer(queued, resp)
			continue
		default:
		}
		break
	}
	return st.wire.send(append(queued, failed...))
}

func (st *serverStream) receive() {
	defer st.s.wg.Done()
	defer close(st.recvDone)
	for {
		reqs, err := st.wire.recv()
		if err != nil {
			st.recvErr = err
			return
		}
		st.received += len(reqs)
		for _, req := range reqs {
			st.accept(req)
		}
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
	st.s.metrics.requests.get(call.op, code).Inc()
	st.s.metrics.seconds.get(call.op, "").Observe(time.Since(call.start).Seconds())
}
