package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// invokeOptions are the flags of `raftgate invoke`.
type invokeOptions struct {
	ingress        string
	send           bool
	idempotencyKey string
	delay          string
	contentType    string
	timeout        time.Duration
}

// statusNotReady is the ingress's answer when a call's client timeout passed
// before the result existed (the invocation goes on).
const statusNotReady = 470

func newInvokeCmd(env cliEnv) *cobra.Command {
	var o invokeOptions
	cmd := &cobra.Command{
		Use:   "invoke SERVICE/HANDLER [BODY]",
		Short: "invoke a handler through the ingress and print the invocation id and result",
		Long: `invoke calls SERVICE/HANDLER with BODY (JSON if it parses as JSON, else text;
"-" reads stdin, "@FILE" reads a file). The invocation id goes to stderr and
the result body to stdout; with --send, stdout gets the invocation id. The
exit code is non-zero when the invocation or the request failed.`,
		Example: `  raftgate invoke Greeter/greet '"Ada"'
  raftgate invoke Greeter/greet '"Ada"' --send --delay 10s
  raftgate invoke Greeter/greet '"Ada"' --idempotency-key order-42`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body []byte
			if len(args) == 2 {
				var err error
				if body, err = readBodyArg(args[1], env.stdin); err != nil {
					return err
				}
			}
			return runInvoke(cmd, env, o, args[0], body)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ingress, "ingress", defaultIngressURL, "ingress base URL")
	f.BoolVar(&o.send, "send", false, "submit without waiting for the result")
	f.StringVar(&o.idempotencyKey, "idempotency-key", "", "de-duplicate by this key: a repeat returns the original invocation")
	f.StringVar(&o.delay, "delay", "", "with --send: run no earlier than now+delay (10s, PT10S)")
	f.StringVar(&o.contentType, "content-type", "", "content-type of BODY (default: application/json when BODY is JSON, else text/plain)")
	f.DurationVar(&o.timeout, "timeout", 0, "stop waiting for a call's result after this long (the invocation goes on)")
	return cmd
}

func readBodyArg(arg string, stdin io.Reader) ([]byte, error) {
	switch {
	case arg == "-":
		return io.ReadAll(stdin)
	case strings.HasPrefix(arg, "@"):
		return os.ReadFile(arg[1:])
	default:
		return []byte(arg), nil
	}
}

// invocationPath checks SERVICE/HANDLER and returns the ingress path.
func invocationPath(target string) (string, error) {
	service, handler, ok := strings.Cut(target, "/")
	if !ok || service == "" || handler == "" || strings.Contains(handler, "/") {
		return "", fmt.Errorf("%q: want SERVICE/HANDLER, like Greeter/greet", target)
	}
	return "/" + url.PathEscape(service) + "/" + url.PathEscape(handler), nil
}

func runInvoke(cmd *cobra.Command, env cliEnv, o invokeOptions, target string, body []byte) error {
	path, err := invocationPath(target)
	if err != nil {
		return err
	}
	if o.delay != "" && !o.send {
		return errors.New("--delay needs --send: a call cannot be delayed")
	}
	// An empty key given on purpose is a mistake (the ingress answers an
	// empty header with 400; HTTP drops surrounding blanks), not a request
	// without a key.
	if cmd.Flags().Changed("idempotency-key") && strings.TrimSpace(o.idempotencyKey) == "" {
		return errors.New("--idempotency-key: empty; give a key or leave the flag out")
	}
	if o.send {
		path += "/send"
		if o.delay != "" {
			path += "?delay=" + url.QueryEscape(o.delay)
		}
	}
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, normalizeBaseURL(o.ingress)+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if ct := bodyContentType(o.contentType, body); ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if o.idempotencyKey != "" {
		req.Header.Set("idempotency-key", o.idempotencyKey)
	}
	if o.timeout > 0 && !o.send {
		req.Header.Set("x-raftgate-timeout", o.timeout.String())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("ingress: reading the answer: %w", err)
	}
	id := resp.Header.Get("x-restate-id")

	if resp.StatusCode == statusNotReady && id != "" {
		fmt.Fprintf(env.stderr, "invocation %s: no result yet; it goes on. Fetch it later with:\n  curl %s/restate/invocation/%s/attach\n",
			id, normalizeBaseURL(o.ingress), id)
		return errSilent
	}
	if resp.StatusCode/100 != 2 {
		if resp.Header.Get("x-restate-error-source") == "invocation" {
			// A recorded failure of the service itself: show its answer as is.
			fmt.Fprintf(env.stderr, "invocation %s failed: %d %s\n", id, resp.StatusCode, http.StatusText(resp.StatusCode))
			writeBody(env.stdout, data)
			return errSilent
		}
		if id != "" {
			fmt.Fprintf(env.stderr, "invocation %s\n", id)
		}
		return errorFromResponse(resp.StatusCode, data)
	}

	if o.send {
		var acc struct {
			InvocationID  string `json:"invocationId"`
			Status        string `json:"status"`
			ExecutionTime string `json:"executionTime"`
		}
		if err := json.Unmarshal(data, &acc); err != nil || acc.InvocationID == "" {
			return fmt.Errorf("ingress: unexpected answer to send: %q", data)
		}
		note := acc.Status
		if acc.ExecutionTime != "" {
			note += ", runs at " + acc.ExecutionTime
		}
		fmt.Fprintf(env.stderr, "invocation %s: %s\n", acc.InvocationID, note)
		fmt.Fprintln(env.stdout, acc.InvocationID)
		return nil
	}
	fmt.Fprintf(env.stderr, "invocation %s: %d %s\n", id, resp.StatusCode, http.StatusText(resp.StatusCode))
	writeBody(env.stdout, data)
	return nil
}

// bodyContentType picks the request's content-type.
func bodyContentType(explicit string, body []byte) string {
	switch {
	case explicit != "":
		return explicit
	case len(body) == 0:
		return ""
	case json.Valid(body):
		return "application/json"
	default:
		return "text/plain; charset=utf-8"
	}
}

// writeBody prints a body, ending it with a newline for the terminal.
func writeBody(w io.Writer, b []byte) {
	w.Write(b)
	if len(b) > 0 && b[len(b)-1] != '\n' {
		io.WriteString(w, "\n")
	}
}
