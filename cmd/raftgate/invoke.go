package main

import (
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
	"github.com/raftgate/raftgate/ingress/client"
	"github.com/raftgate/raftgate/internal/duration"
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

// splitTarget checks SERVICE/HANDLER and returns its two parts.
func splitTarget(target string) (service, handler string, err error) {
	service, handler, ok := strings.Cut(target, "/")
	if !ok || service == "" || handler == "" || strings.Contains(handler, "/") {
		return "", "", fmt.Errorf("%q: want SERVICE/HANDLER, like Greeter/greet", target)
	}
	return service, handler, nil
}

func runInvoke(cmd *cobra.Command, env cliEnv, o invokeOptions, admin *adminClient, target string, body []byte) error {
	service, handler, err := splitTarget(target)
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
	var opts []client.Option
	if o.delay != "" {
		d, err := duration.Parse(o.delay)
		if err != nil {
			return fmt.Errorf("--delay: %w", err)
		}
		opts = append(opts, client.WithDelay(d))
	}
	if o.key != "" {
		opts = append(opts, client.WithKey(o.key))
	}
	if o.idempotencyKey != "" {
		opts = append(opts, client.WithIdempotencyKey(o.idempotencyKey))
	}
	if len(body) == 0 {
		body = nil
	} else {
		opts = append(opts, client.WithContentType(bodyContentType(o.contentType, body)))
	}
	var common []client.Option
	if o.token != "" {
		common = append(common, client.WithHeader("Authorization", "Bearer "+o.token))
	}
	ingress := normalizeBaseURL(o.ingress)
	c, err := client.New(ingress, common...)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if !o.send && o.token != "" {
		mayAttach, err := tokenMayAttach(ctx, c, service, handler)
		if err != nil {
			return err
		}
		if !mayAttach {
			// The call's own request needs no attach grant: wait on it
			// (without progress, which needs the id while waiting).
			fmt.Fprintln(env.stderr, "the token may not attach to invocations: waiting on the call itself (attempts are not shown)")
			if o.timeout > 0 {
				opts = append(opts, client.WithTimeout(o.timeout))
			}
			resp, err := c.Call(ctx, service, handler, body, opts...)
			if errors.Is(err, client.ErrNotReady) {
				fmt.Fprintf(env.stderr, "invocation %s: no result yet; it goes on. Fetch it later with a token that may attach:\n  curl -H 'Authorization: Bearer …' %s/restate/invocation/%s/attach\n",
					invocationOf(err), ingress, invocationOf(err))
				return errSilent
			}
			if err != nil {
				return ingressFailure(env, err, "")
			}
			return printResult(env, resp.InvocationID, resp)
		}
	}
	sent, err := c.Send(ctx, service, handler, body, opts...)
	if err != nil {
		return ingressFailure(env, err, "")
	}
	if sent.InvocationID == "" {
		return errors.New("ingress: the answer to send names no invocation")
	}
	id := sent.InvocationID
	if o.send {
		note := sent.Status
		if !sent.ExecutionTime.IsZero() {
			note += ", runs at " + sent.ExecutionTime.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(env.stderr, "invocation %s: %s\n", id, note)
		fmt.Fprintln(env.stdout, id)
		return nil
	}

	// A call is a send and an attach: with the id known while it waits,
	// invoke can say what the invocation is waiting for.
	var wait []client.Option
	if o.timeout > 0 {
		wait = append(wait, client.WithTimeout(o.timeout))
	}
	stopWatching := watchInvocation(ctx, env.stderr, admin, id, invokeProgressEvery)
	resp, err := c.Attach(ctx, id, wait...)
	stopWatching()
	if errors.Is(err, client.ErrNotReady) {
		fmt.Fprintf(env.stderr, "invocation %s: no result yet; it goes on. Fetch it later with:\n  curl %s/restate/invocation/%s/attach\n",
			id, ingress, id)
		return errSilent
	}
	if err != nil {
		return ingressFailure(env, err, id)
	}
	return printResult(env, id, resp)
}

// printResult prints a result: its status on stderr, its body on stdout.
func printResult(env cliEnv, id string, resp *client.Response) error {
	fmt.Fprintf(env.stderr, "invocation %s: %d %s\n", id, resp.Status, http.StatusText(resp.Status))
	writeBody(env.stdout, resp.Body)
	return nil
}

// invocationOf is the invocation an ingress error names, if any.
func invocationOf(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return e.InvocationID
	}
	return ""
}

// tokenMayAttach asks the ingress, before anything is created, whether the
// client's token may attach to service/handler's invocations: an attach by
// an idempotency key nobody uses is refused with 403 for a token without
// the attach grant (or the service), and otherwise answered "not found" or
// "not ready" at once. A 403 about the service is returned as the error
// the call would get.
func tokenMayAttach(ctx context.Context, c *client.Client, service, handler string) (bool, error) {
	probe := fmt.Sprintf("raftgate-cli-probe-%d", time.Now().UnixNano())
	_, err := c.AttachByKey(ctx, service, handler, probe, client.WithTimeout(time.Millisecond))
	var e *client.Error
	if err != nil && !errors.As(err, &e) {
		return false, fmt.Errorf("ingress: %w", err)
	}
	if e == nil || e.Code != http.StatusForbidden {
		return true, nil // a 401 or an unknown token shows on the call itself
	}
	if fe := errorFromResponse(e.Code, e.Body); !strings.Contains(fe.Error(), "may not attach") {
		return false, fe
	}
	return false, nil
}

// ingressFailure reports an error of the ingress client: a recorded failure
// of the service itself is shown as is, an error of the cluster as an
// error. id names the invocation when the answer does not.
func ingressFailure(env cliEnv, err error, id string) error {
	var e *client.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("ingress: %w", err)
	}
	if e.InvocationID != "" {
		id = e.InvocationID
	}
	if e.Source == "invocation" {
		fmt.Fprintf(env.stderr, "invocation %s failed: %d %s\n", id, e.Code, http.StatusText(e.Code))
		writeBody(env.stdout, e.Body)
		return errSilent
	}
	if id != "" {
		fmt.Fprintf(env.stderr, "invocation %s\n", id)
	}
	return errorFromResponse(e.Code, e.Body)
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
