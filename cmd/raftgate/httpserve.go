package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
)

// httpService serves one of the node's HTTP APIs (ingress or admin) on a
// listener bound beforehand (listenNode), so a port conflict is an error of
// the start, not a log line later.
type httpService struct {
	name string
	srv  *http.Server
	ln   net.Listener
	done chan error // Serve's result
}

// serveHTTP serves h on ln in a goroutine owned by the returned service,
// until Shutdown. There is no write timeout: attach and calls long-poll;
// request bodies are bounded by the handlers.
func serveHTTP(name string, ln net.Listener, h http.Handler, logger zerolog.Logger) *httpService {
	l := logger.With().Str("component", name).Logger()
	s := &httpService{
		name: name,
		ln:   ln,
		done: make(chan error, 1),
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    1 << 20,
			ErrorLog:          log.New(l, "", 0),
		},
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	l.Info().Str("addr", s.Addr()).Msg("listening")
	return s
}

// Addr is the bound address (useful with port 0).
func (s *httpService) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting, lets in-flight requests finish until ctx ends,
// then closes what is left. It returns once the serving goroutine ended.
func (s *httpService) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("%s: graceful shutdown: %w", s.name, err), s.srv.Close())
	}
	if serveErr := <-s.done; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("%s: serve: %w", s.name, serveErr))
	}
	return err
}
