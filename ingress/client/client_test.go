package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/ingress/client"
	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/server/servertest"
	"github.com/raftgate/raftgate/test/freeport"
)

// newClient is a client of the package's node (TestMain).
func newClient(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(ingressURL+"/", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// uniqueKey is an idempotency key no other run of the test used on the
// package's node.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

func TestCall(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	resp, err := c.Call(ctx, "Greeter", "greet", []byte(`{"name":"ann"}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || string(resp.Body) != `hello, {"name":"ann"}` || resp.ContentType != "application/json" {
		t.Fatalf("response = %+v", resp)
	}
	if _, err := invocation.ParseID(resp.InvocationID); err != nil {
		t.Fatalf("invocation id %q: %v", resp.InvocationID, err)
	}
	if !resp.IdempotencyExpires.IsZero() {
		t.Fatal("idempotency-expires without a key")
	}
	key := uniqueKey(t)
	keyed, err := c.Call(ctx, "Greeter", "greet", []byte("x"), client.WithContentType("text/plain"), client.WithIdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if keyed.InvocationID != invocation.Idempotent("Greeter", "greet", key).String() || keyed.IdempotencyExpires.IsZero() ||
		keyed.ContentType != "text/plain" {
		t.Fatalf("keyed call = %+v", keyed)
	}
	// JSON content type (the default) with a body that is not JSON: 400.
	_, err = c.Call(ctx, "Greeter", "greet", []byte("{oops"))
	var e *client.Error
	if !errors.As(err, &e) || e.Code != 400 || e.Source != "ingress" || !strings.Contains(e.Message, "JSON") {
		t.Fatalf("bad JSON: %v", err)
	}
}

func TestCallErrors(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	var e *client.Error
	_, err := c.Call(ctx, "Greeter", "greet", []byte(`"fail"`))
	if !errors.As(err, &e) || e.Code != 422 || e.Source != "invocation" || e.Message != "cannot greet" || e.InvocationID == "" {
		t.Fatalf("service failure: %#v", err)
	}
	if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrNotReady) {
		t.Fatal("service failure matches a sentinel")
	}
	_, err = c.Call(ctx, "Greeter", "greet", []byte(`"exhaust"`))
	if !errors.As(err, &e) || e.Code != 500 || e.Source != "invocation" || !strings.Contains(e.Message, "gave up after 2 attempts") {
		t.Fatalf("exhausted: %#v", err)
	}
	_, err = c.Call(ctx, "Nope", "greet", nil)
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &e) || !strings.Contains(e.Message, "service 'Nope' not found") {
		t.Fatalf("unknown service: %v", err)
	}
	_, err = c.Call(ctx, "Greeter", "wave", nil)
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "no handler 'wave'") {
		t.Fatalf("unknown handler: %v", err)
	}
}

func TestSendAttachOutput(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	delayedKey := uniqueKey(t) + "-delayed"
	sent, err := c.Send(ctx, "Greeter", "greet", []byte(`1`), client.WithIdempotencyKey(delayedKey), client.WithDelay(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if sent.Status != "Accepted" || sent.ExecutionTime.IsZero() || time.Until(sent.ExecutionTime) < 80*time.Second {
		t.Fatalf("send = %+v", sent)
	}
	again, err := c.Send(ctx, "Greeter", "greet", []byte(`1`), client.WithIdempotencyKey(delayedKey))
	if err != nil || again.Status != "PreviouslyAccepted" || again.InvocationID != sent.InvocationID {
		t.Fatalf("second send = %+v, %v", again, err)
	}
	// Not ready yet: it runs in 90 seconds.
	if _, err := c.Output(ctx, sent.InvocationID); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("output before completion: %v", err)
	}
	if _, err := c.OutputByKey(ctx, "Greeter", "greet", delayedKey); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("output by key before completion: %v", err)
	}
	_, err = c.Attach(ctx, sent.InvocationID, client.WithTimeout(20*time.Millisecond))
	var e *client.Error
	if !errors.Is(err, client.ErrNotReady) || !errors.As(err, &e) || e.InvocationID != sent.InvocationID {
		t.Fatalf("attach timeout: %v", err)
	}

	// One that runs at once, held in the service until released.
	key := uniqueKey(t)
	held, err := c.Send(ctx, "Greeter", "greet", []byte("hold:"+key), client.WithContentType("text/plain"), client.WithIdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Output(ctx, held.InvocationID); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("output while the service holds it: %v", err)
	}
	greeter.release(key)
	for _, get := range []func() (*client.Response, error){
		func() (*client.Response, error) { return c.Attach(ctx, held.InvocationID) },
		func() (*client.Response, error) { return c.Output(ctx, held.InvocationID) },
		func() (*client.Response, error) { return c.AttachByKey(ctx, "Greeter", "greet", key) },
		func() (*client.Response, error) { return c.OutputByKey(ctx, "Greeter", "greet", key) },
	} {
		resp, err := get()
		if err != nil || string(resp.Body) != "hello, hold:"+key || resp.InvocationID != held.InvocationID || resp.IdempotencyExpires.IsZero() {
			t.Fatalf("result = %+v, %v", resp, err)
		}
	}
	// Unknown and malformed ids.
	if _, err := c.Output(ctx, invocation.Random().String()); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := c.Attach(ctx, "inv_nope"); !errors.As(err, &e) || e.Code != 400 {
		t.Fatalf("malformed id: %v", err)
	}
}

// TestRetryAfter: a node at its concurrency limit answers 429 with a
// Retry-After, which the client reports.
func TestRetryAfter(t *testing.T) {
	ctx := context.Background()
	_, cfgs := servertest.StartCluster(t, 1, freeport.Client, func(c *server.Config) { c.MaxConcurrent = 1 })
	if err := register(cfgs[0].AdminAddr, "Greeter", `{"url":"`+greeterURL+`","handlers":["greet"]}`); err != nil {
		t.Fatal(err)
	}
	c, err := client.New("http://"+cfgs[0].IngressAddr, client.WithHeader("X-Test", "1"),
		client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	first := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, "Greeter", "greet", []byte("hold:"+key), client.WithContentType("text/plain"))
		first <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the held call to reach the service", func() bool { return greeter.arrived(key) })
	_, err = c.Send(ctx, "Greeter", "greet", nil)
	var e *client.Error
	if !errors.As(err, &e) || e.Code != 429 {
		t.Fatalf("send while the held call takes the one slot: %v, want 429", err)
	}
	if e.RetryAfter != time.Second || e.Source != "ingress" {
		t.Fatalf("at the limit: %v (Retry-After %v), want the ingress's default 1s", e, e.RetryAfter)
	}
	greeter.release(key)
	if err := <-first; err != nil {
		t.Fatalf("admitted call: %v", err)
	}
}
