package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// echoServiceName is the service `raftgate echo` serves.
const echoServiceName = "Echo"

// defaultEchoAddr is where the README's three-node cluster registers it.
const defaultEchoAddr = "127.0.0.1:9999"

func newEchoCmd(env cliEnv) *cobra.Command {
	var addr, ingress, adminURL string
	cmd := &cobra.Command{
		Use:   "echo [--addr HOST:PORT]",
		Short: "serve example services: Echo, whose every handler answers the request body, the object Counter and the workflow Signup",
		Long: `echo serves example services over HTTP until interrupted: a POST to
/Echo/HANDLER (any handler) answers 200 with the request's body and
content-type; Counter is a virtual object (add, and get: shared) and Signup
a workflow (run, and status: shared). It prints the commands that register
them and call them; --ingress and --admin name the node they use.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--addr: %w", err)
			}
			exe, _ := os.Executable()
			printEchoHelp(env.stdout, devCLI(os.Args[0], exe), "http://"+ln.Addr().String(), ingress, adminURL)
			mux := http.NewServeMux()
			mux.Handle("/"+echoServiceName+"/", newEcho(env.stderr))
			newKeyedExamples(mux)
			return serveUntilDone(cmd.Context(), ln, mux)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", defaultEchoAddr, "listen address")
	cmd.Flags().StringVar(&ingress, "ingress", defaultIngressURL, "ingress base URL the printed commands call")
	cmd.Flags().StringVar(&adminURL, "admin", defaultAdminURL, "admin API base URL the printed commands register with")
	return cmd
}

// printEchoHelp prints what echo serves and the commands that register and
// call it.
func printEchoHelp(out io.Writer, cli, url, ingress, adminURL string) {
	fmt.Fprintf(out, `%[1]s service at %[2]s (POST /%[1]s/HANDLER answers its body), with the virtual object %[3]s and the workflow %[4]s.
Register them (through any node):
  %[5]s services add %[1]s %[2]s --admin %[6]s
  %[5]s services add %[3]s %[2]s --kind object --shared get --admin %[6]s
  %[5]s services add %[4]s %[2]s --kind workflow --admin %[6]s
Then try:
  curl -s %[7]s/%[1]s/echo -H 'content-type: application/json' -d '"hi"'
  curl -s %[7]s/%[3]s/alice/add -H 'content-type: application/json' -d '5'
  curl -s %[7]s/%[3]s/alice/get -d ''
  curl -s %[7]s/%[4]s/ada/run/send -H 'content-type: application/json' -d '{"email":"ada@example.com"}'
  curl -s %[7]s/restate/workflow/%[4]s/ada/attach
Ctrl-C stops it.
`, echoServiceName, url, counterName, signupName, cli, adminURL, ingress)
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
