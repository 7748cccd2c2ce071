package main

import (
	"bytes"
	"context"
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

	"github.com/raftgate/raftgate/ingress/admin"
)

// invokeOptions are the flags of `raftgate invoke`.
type invokeOptions struct {
	ingress        string
	key            string
	send           bool
	idempotencyKey string
	delay          string
	contentType    string
	timeout        time.Duration
	token          string
}

// statusNotReady is the ingress's answer when a call's client timeout passed
// before the result existed (the invocation goes on).
const statusNotReady = 470

func newInvokeCmd(env cliEnv) *cobra.Command {
	var o invokeOptions
	var newAdmin func() *adminClient
	cmd := &cobra.Command{
		Use:   "invoke SERVICE/HANDLER [BODY]",
		Short: "invoke a handler through the ingress and print the invocation id and result",
		Long: `invoke calls SERVICE/HANDLER with BODY (JSON if it parses as JSON, else text;
"-" reads stdin, "@FILE" reads a file). The invocation id goes to stderr and
the result body to stdout; with --send, stdout gets the invocation id. The
exit code is non-zero when the invocation or the request failed.
A call is sent, then attached to. While it waits, stderr says so, with
each failed delivery attempt, as the admin API (--admin) reports them.`,
		Example: `  raftgate invoke Greeter/greet '"Ada"'
  raftgate invoke Greeter/greet '"Ada"' --send --delay 10s
  raftgate invoke Greeter/greet '"Ada"' --idempotency-key order-42
  raftgate invoke Counter/add 1 --key alice   # a virtual object's key, or a workflow's id`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body []byte
			if len(args) == 2 {
				var err error
				if body, err = readBodyArg(args[1], env.stdin); err != nil {
					return err
				}
			}
			return runInvoke(cmd, env, o, newAdmin(), args[0], body)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ingress, "ingress", defaultIngressURL, "ingress base URL")
	f.StringVar(&o.key, "key", "", "the object key or workflow id, for a virtual object or workflow")
	f.BoolVar(&o.send, "send", false, "submit without waiting for the result")
	f.StringVar(&o.idempotencyKey, "idempotency-key", "", "de-duplicate by this key: a repeat returns the original invocation")
	f.StringVar(&o.delay, "delay", "", "with --send: run no earlier than now+delay (10s, PT10S)")
	f.StringVar(&o.contentType, "content-type", "", "content-type of BODY (default: application/json when BODY is JSON, else text/plain)")
	f.DurationVar(&o.timeout, "timeout", 0, "stop waiting for a call's result after this long (the invocation goes on)")
	f.StringVar(&o.token, "token", "", "ingress API token, sent as Authorization: Bearer (see --ingress-tokens of the server); a call with a token that may not attach waits on the call request itself")
	newAdmin = addAdminFlags(cmd)
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

// invocationPath checks SERVICE/HANDLER and returns the ingress path, with
// key (an object key or workflow id) between the two when given.
func invocationPath(target, key string) (string, error) {
	service, handler, ok := strings.Cut(target, "/")
	if !ok || service == "" || handler == "" || strings.Contains(handler, "/") {
		return "", fmt.Errorf("%q: want SERVICE/HANDLER, like Greeter/greet", target)
	}
	if key != "" {
		return "/" + url.PathEscape(service) + "/" + url.PathEscape(key) + "/" + url.PathEscape(handler), nil
	}
	return "/" + url.PathEscape(service) + "/" + url.PathEscape(handler), nil
}

func runInvoke(cmd *cobra.Command, env cliEnv, o invokeOptions, admin *adminClient, target string, body []byte) error {
	path, err := invocationPath(target, o.key)
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
	ingress := normalizeBaseURL(o.ingress)
	if !o.send && o.token != "" {
		mayAttach, err := tokenMayAttach(cmd.Context(), ingress, target, o.token)
		if err != nil {
			return err
		}
		if !mayAttach {
			// The call's own request needs no attach grant: wait on it
			// (without progress, which needs the id while waiting).
			fmt.Fprintln(env.stderr, "the token may not attach to invocations: waiting on the call itself (attempts are not shown)")
			return callAndWait(cmd, env, o, ingress, path, body)
		}
	}
	sendPath := path + "/send"
	if o.delay != "" {
		sendPath += "?delay=" + url.QueryEscape(o.delay)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, ingress+sendPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if ct := bodyContentType(o.contentType, body); ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if o.idempotencyKey != "" {
		req.Header.Set("idempotency-key", o.idempotencyKey)
	}
	setToken(req, o.token)
	status, hdr, data, err := roundTrip(req)
	if err != nil {
		return err
	}
	if status/100 != 2 {
		return ingressFailure(env, status, hdr, data)
	}
	var acc struct {
		InvocationID  string `json:"invocationId"`
		Status        string `json:"status"`
		ExecutionTime string `json:"executionTime"`
	}
	if err := json.Unmarshal(data, &acc); err != nil || acc.InvocationID == "" {
		return fmt.Errorf("ingress: unexpected answer to send: %q", data)
	}
	if o.send {
		note := acc.Status
		if acc.ExecutionTime != "" {
			note += ", runs at " + acc.ExecutionTime
		}
		fmt.Fprintf(env.stderr, "invocation %s: %s\n", acc.InvocationID, note)
		fmt.Fprintln(env.stdout, acc.InvocationID)
		return nil
	}

	// A call is a send and an attach: with the id known while it waits,
	// invoke can say what the invocation is waiting for.
	id := acc.InvocationID
	req, err = http.NewRequestWithContext(cmd.Context(), http.MethodGet, ingress+"/restate/invocation/"+url.PathEscape(id)+"/attach", nil)
	if err != nil {
		return err
	}
	if o.timeout > 0 {
		req.Header.Set("x-raftgate-timeout", o.timeout.String())
	}
	setToken(req, o.token)
	stopWatching := watchInvocation(cmd.Context(), env.stderr, admin, id, invokeProgressEvery)
	status, hdr, data, err = roundTrip(req)
	stopWatching()
	if err != nil {
		return err
	}
	if status == statusNotReady {
		fmt.Fprintf(env.stderr, "invocation %s: no result yet; it goes on. Fetch it later with:\n  curl %s/restate/invocation/%s/attach\n",
			id, ingress, id)
		return errSilent
	}
	if status/100 != 2 {
		if hdr.Get("x-restate-id") == "" {
			hdr.Set("x-restate-id", id)
		}
		return ingressFailure(env, status, hdr, data)
	}
	fmt.Fprintf(env.stderr, "invocation %s: %d %s\n", id, status, http.StatusText(status))
	writeBody(env.stdout, data)
	return nil
}

// tokenMayAttach asks the ingress, before anything is created, whether
// token may attach to target's invocations: an attach by an idempotency key
// nobody uses is refused with 403 for a token without the attach grant (or
// the service), and otherwise answered "not found" or "not ready" at once.
// A 403 about the service is returned as the error the call would get.
func tokenMayAttach(ctx context.Context, ingress, target, token string) (bool, error) {
	service, handler, _ := strings.Cut(target, "/")
	probe := ingress + "/restate/invocation/" + url.PathEscape(service) + "/" + url.PathEscape(handler) + "/" +
		url.PathEscape(fmt.Sprintf("raftgate-cli-probe-%d", time.Now().UnixNano())) + "/attach"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probe, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("x-raftgate-timeout", "1ms")
	setToken(req, token)
	status, _, data, err := roundTrip(req)
	if err != nil {
		return false, err
	}
	if status != http.StatusForbidden {
		return true, nil // a 401 or an unknown token shows on the call itself
	}
	if e := errorFromResponse(status, data); !strings.Contains(e.Error(), "may not attach") {
		return false, e
	}
	return false, nil
}

// callAndWait makes a plain call (POST path) and prints its result, for a
// token that may call but not attach.
func callAndWait(cmd *cobra.Command, env cliEnv, o invokeOptions, ingress, path string, body []byte) error {
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, ingress+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if ct := bodyContentType(o.contentType, body); ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if o.idempotencyKey != "" {
		req.Header.Set("idempotency-key", o.idempotencyKey)
	}
	if o.timeout > 0 {
		req.Header.Set("x-raftgate-timeout", o.timeout.String())
	}
	setToken(req, o.token)
	status, hdr, data, err := roundTrip(req)
	if err != nil {
		return err
	}
	id := hdr.Get("x-restate-id")
	if status == statusNotReady {
		fmt.Fprintf(env.stderr, "invocation %s: no result yet; it goes on. Fetch it later with a token that may attach:\n  curl -H 'Authorization: Bearer …' %s/restate/invocation/%s/attach\n",
			id, ingress, id)
		return errSilent
	}
	if status/100 != 2 {
		return ingressFailure(env, status, hdr, data)
	}
	fmt.Fprintf(env.stderr, "invocation %s: %d %s\n", id, status, http.StatusText(status))
	writeBody(env.stdout, data)
	return nil
}

// setToken adds the ingress API token, if any.
func setToken(req *http.Request, token string) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
}

// roundTrip sends req to the ingress and reads the whole answer.
func roundTrip(req *http.Request) (int, http.Header, []byte, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("ingress: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("ingress: reading the answer: %w", err)
	}
	return resp.StatusCode, resp.Header, data, nil
}

// ingressFailure reports a non-2xx answer: a recorded failure of the
// service itself is shown as is, an error of the cluster as an error.
func ingressFailure(env cliEnv, status int, hdr http.Header, data []byte) error {
	id := hdr.Get("x-restate-id")
	if hdr.Get("x-restate-error-source") == "invocation" {
		fmt.Fprintf(env.stderr, "invocation %s failed: %d %s\n", id, status, http.StatusText(status))
		writeBody(env.stdout, data)
		return errSilent
	}
	if id != "" {
		fmt.Fprintf(env.stderr, "invocation %s\n", id)
	}
	return errorFromResponse(status, data)
}

// invokeProgressEvery is how often a waiting call asks the admin API how
// its invocation is doing; a call answered sooner prints nothing of it.
const invokeProgressEvery = time.Second

// watchInvocation reports on w, until stop is called, that invocation id
// is waited for and each delivery attempt that failed meanwhile, as the
// admin API (GET /invocations/{id}) tells them.
func watchInvocation(ctx context.Context, w io.Writer, c *adminClient, id string, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var reported uint32
		var saidWaiting, saidUnknown bool
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var v admin.InvocationView
			err := c.do(ctx, http.MethodGet, "/invocations/"+url.PathEscape(id), nil, &v)
			if ctx.Err() != nil {
				return
			}
			if !saidWaiting {
				saidWaiting = true
				fmt.Fprintf(w, "invocation %s: waiting for its result\n", id)
			}
			if err != nil {
				if !saidUnknown {
					saidUnknown = true
					fmt.Fprintf(w, "invocation %s: cannot tell its attempts: %v\n", id, err)
				}
				continue
			}
			if v.Attempts > reported && v.LastError != "" && v.Result == nil {
				reported = v.Attempts
				next := ""
				if v.NextRetryAt != "" {
					next = "; next attempt at " + v.NextRetryAt
				}
				fmt.Fprintf(w, "invocation %s: attempt %d failed: %s%s\n", id, v.Attempts, v.LastError, next)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
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
