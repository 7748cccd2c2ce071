package server_test

import (
	"context"
	"errors"
	"os"
	"os/signal"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/server"
)

// A program that runs a one-node raftgate cluster until it is interrupted.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg := server.DefaultConfig()
	cfg.DataDir = "/var/lib/raftgate"
	cfg.Logger = zerolog.New(os.Stderr).With().Timestamp().Logger()
	node, err := server.New(cfg)
	if err != nil {
		return err // server.ErrInvalidConfig names the field's flag, or a port is in use
	}
	if err := node.Start(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return node.Close()
	case err := <-node.Err():
		return errors.Join(err, node.Close())
	}
}
