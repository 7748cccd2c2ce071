package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// echoServiceName is the service `raftgate echo` serves.
const echoServiceName = "Echo"

// defaultEchoAddr is where the README's three-node cluster registers it.
const defaultEchoAddr = "127.0.0.1:9999"

func newEchoCmd(env cliEnv) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "echo [--addr HOST:PORT]",
		Short: "serve an example service, Echo, whose every handler answers the request body",
		Long: `echo serves the example service Echo over HTTP until interrupted: a POST to
/Echo/HANDLER (any handler) answers 200 with the request's body and
content-type. Register it with
  raftgate services add Echo http://ADDR
and call it through any node, for example raftgate invoke Echo/echo '"hi"'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--addr: %w", err)
			}
			fmt.Fprintf(env.stdout, "%s service at http://%s (POST /%s/HANDLER answers its body); Ctrl-C stops it\n",
				echoServiceName, ln.Addr(), echoServiceName)
			return serveUntilDone(cmd.Context(), ln, newEcho(env.stderr))
		},
	}
	cmd.Flags().StringVar(&addr, "addr", defaultEchoAddr, "listen address")
	return cmd
}

// newEcho is the Echo service: every handler answers the body it got, and
// each call is noted on log.
func newEcho(log io.Writer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /"+echoServiceName+"/{handler}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(log, "%s/%s: invocation %s, attempt %s, %d bytes\n", echoServiceName, r.PathValue("handler"),
			r.Header.Get("x-restate-id"), r.Header.Get("x-raftgate-attempt"), len(body))
		if ct := r.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.Write(body)
	})
	return mux
}

// serveUntilDone serves h on ln until ctx ends, then lets requests in
// flight finish for a few seconds.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}
