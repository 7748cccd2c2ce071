package server

import (
	"context"
	"crypto/tls"
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
//
// It speaks HTTP/1.1 and HTTP/2: cleartext HTTP/2 with prior knowledge
// (h2c, as proxies such as Envoy send it) without TLS, and HTTP/2 by ALPN
// with tlsConfig (nil: no TLS).
func serveHTTP(name string, ln net.Listener, h http.Handler, tlsConfig *tls.Config, logger zerolog.Logger) *httpService {
	l := logger.With().Str("component", name).Logger()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
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
			Protocols:         &protocols,
			TLSConfig:         tlsConfig,
		},
	}
	if tlsConfig != nil {
		// Certificates come from tlsConfig; ServeTLS adds "h2" to ALPN.
		go func() { s.done <- s.srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { s.done <- s.srv.Serve(ln) }()
	}
	l.Info().Str("addr", s.Addr()).Bool("tls", tlsConfig != nil).Msg("listening")
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
