package main

import (
	"context"
	"errors"

	"github.com/rs/zerolog"
)

// runServer runs one raftgate node with cfg until ctx is done, then shuts
// it down within cfg.ShutdownGrace and returns nil; it returns an error if
// the node cannot start or fails. cfg has passed Validate.
//
// Helpers for the wiring: startHTTP / (*httpService).Shutdown serve the
// ingress and admin handlers; nodeTLS builds the gRPC TLS configs.
//
// Stub: the lead's wiring (raftlog node + partitions + leadership +
// dispatch + ingress + admin) replaces this file.
func runServer(ctx context.Context, cfg ServerConfig, logger zerolog.Logger) error {
	return errors.New("server: not wired yet")
}
