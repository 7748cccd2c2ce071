package dispatch

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftgate/raftgate/rpc"
)

// ServerConfig configures a Server. Zero fields take the defaults of
// DefaultServerConfig.
type ServerConfig struct {
	// MaxInFlightPerStream bounds the requests of one stream being handled
	// at once; past it requests are answered OVERLOADED at once.
	MaxInFlightPerStream int
	// MaxInFlightPerNode bounds the requests of all streams being handled
	// at once.
	MaxInFlightPerNode int
	// MaxSendBatch bounds how many queued answers one wake-up of a
	// stream's sender takes (and so one batch frame carries) before it
	// checks for shutdown again.
	MaxSendBatch int
	Logger       zerolog.Logger
	// Registerer receives the server's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// DefaultServerConfig returns the defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		MaxInFlightPerStream: 4096,
		MaxInFlightPerNode:   16384,
		MaxSendBatch:         256,
		Logger:               zerolog.Nop(),
	}
}

func (c ServerConfig) withDefaults() ServerConfig {
	d := DefaultServerConfig()
	if c.MaxInFlightPerStream <= 0 {
		c.MaxInFlightPerStream = d.MaxInFlightPerStream
	}
	if c.MaxInFlightPerNode <= 0 {
		c.MaxInFlightPerNode = d.MaxInFlightPerNode
	}
	if c.MaxSendBatch <= 0 {
		c.MaxSendBatch = d.MaxSendBatch
	}
	return c
}

// Server serves the Dispatch service over a Backend.
type Server struct {
	rpc.UnimplementedDispatchServer

	backend Backend
	cfg     ServerConfig
	log     zerolog.Logger
	metrics *serverMetrics
	// inFlight counts requests being handled on all streams.
	inFlight atomic.Int64

	// mu guards closed and streams.
	mu      sync.Mutex
	closed  bool
	streams map[*serverStream]struct{}

	// wg tracks stream handlers and the goroutines they start.
	wg sync.WaitGroup
}

// NewServer returns a Server that executes requests on b.
func NewServer(b Backend, cfg ServerConfig) *Server {
	cfg = cfg.withDefaults()
	log := cfg.Logger.With().Str("component", "dispatch-server").Logger()
	return &Server{
		backend: b,
		cfg:     cfg,
		log:     log,
		metrics: newServerMetrics(cfg.Registerer, log),
		streams: map[*serverStream]struct{}{},
	}
}

// Register registers the Dispatch service on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rpc.RegisterDispatchServer(g, s)
}

// Stream serves one per-message dispatch stream (clients of releases
// before Batches) until the client ends it, it breaks, or the server
// closes.
func (s *Server) Stream(ss rpc.Dispatch_StreamServer) error {
	return s.serve(ss.Context(), &streamServerWire{s: ss, metrics: s.metrics})
}

// Batches serves one batched dispatch stream, as Stream does.
func (s *Server) Batches(bs rpc.Dispatch_BatchesServer) error {
	return s.serve(bs.Context(), batchServerWire{s: bs, maxMsgs: s.cfg.MaxSendBatch, metrics: s.metrics})
}

func (s *Server) serve(ctx context.Context, w serverWire) error {
	st := newServerStream(ctx, s, w)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return status.Error(codes.Unavailable, "dispatch server is closed")
	}
	s.streams[st] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.metrics.streams.Inc()
	defer func() {
		s.metrics.streams.Dec()
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
		s.wg.Done()
	}()
	return st.run()
}

// Close answers every request in flight with rpc.ErrLostLeadership (safe to
// retry), cancels their contexts, ends every stream and waits for the
// handlers to return. Streams opened afterwards are refused. It does not
// stop the grpc.Server.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	streams := make([]*serverStream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.shutdown()
	}
	s.wg.Wait()
}

// acquire takes a node-wide in-flight slot.
func (s *Server) acquire() bool {
	if s.inFlight.Add(1) > int64(s.cfg.MaxInFlightPerNode) {
		s.inFlight.Add(-1)
		return false
	}
	s.metrics.inFlight.Inc()
	return true
}

func (s *Server) release() {
	s.inFlight.Add(-1)
	s.metrics.inFlight.Dec()
}
