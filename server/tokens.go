package server

import (
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/ingress"
)

// loadIngressTokens reads --ingress-tokens; nil when it is not set
// (authentication off).
func loadIngressTokens(cfg Config, logger zerolog.Logger) (*ingress.Tokens, error) {
	if cfg.IngressTokens == "" {
		return nil, nil
	}
	tokens, err := ingress.LoadTokens(cfg.IngressTokens)
	if err != nil {
		return nil, err
	}
	logger.Info().Str("file", cfg.IngressTokens).Str("tokens", strings.Join(tokens.Names(), ",")).
		Msg("ingress authentication on")
	return tokens, nil
}

// warnIfIngressOpen warns, as the ingress starts serving, when it takes
// every request without authentication (not in `dev`).
func (n *Server) warnIfIngressOpen() {
	if n.cfg.IngressTokens == "" && !n.cfg.OpenIngressExpected {
		n.log.Warn().Str("ingress", n.cfg.IngressAddr).
			Msg("the ingress accepts every request without authentication: give --ingress-tokens in production (docs/operations.md, Ingress authentication)")
	}
}

// reloadTokensOnHangup re-reads the token file on every SIGHUP and hands
// the new set to the ingress. A file that does not load keeps the tokens in
// force and logs why. It returns a function that stops the watch and waits
// for its goroutine.
func (n *Server) reloadTokensOnHangup() (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case <-hup:
				tokens, err := ingress.LoadTokens(n.cfg.IngressTokens)
				if err != nil {
					n.log.Error().Err(err).Msg("ingress tokens not reloaded: the tokens loaded before stay in force")
					continue
				}
				n.ingress.SetTokens(tokens)
				n.log.Info().Str("file", n.cfg.IngressTokens).Str("tokens", strings.Join(tokens.Names(), ",")).
					Msg("ingress tokens reloaded")
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-ended
	}
}
