package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/ingress"
	"github.com/raftgate/raftgate/ingress/client"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

func echo(inv *rpc.Invoke) *rpc.Result {
	return &rpc.Result{Status: 200, Body: inv.Body, ContentType: inv.ContentType}
}

func newClient(t *testing.T, cluster ingress.Dispatcher, mutate func(*ingress.Config), opts ...client.Option) *client.Client {
	t.Helper()
	srv := startIngress(t, cluster, mutate)
	c, err := client.New(srv.URL+"/", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
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
	c := newClient(t, newMemCluster(echo), nil)
	resp, err := c.Call(ctx, "Greeter", "greet", []byte(`{"name":"ann"}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || string(resp.Body) != `{"name":"ann"}` || resp.ContentType != "application/json" {
		t.Fatalf("response = %+v", resp)
	}
	if _, err := invocation.ParseID(resp.InvocationID); err != nil {
		t.Fatalf("invocation id %q: %v", resp.InvocationID, err)
	}
	if !resp.IdempotencyExpires.IsZero() {
		t.Fatal("idempotency-expires without a key")
	}
	keyed, err := c.Call(ctx, "Greeter", "greet", []byte("x"), client.WithContentType("text/plain"), client.WithIdempotencyKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	if keyed.InvocationID != invocation.Idempotent("Greeter", "greet", "k").String() || keyed.IdempotencyExpires.IsZero() ||
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
	cluster := newMemCluster(func(inv *rpc.Invoke) *rpc.Result {
		if string(inv.Body) == `"fail"` {
			return &rpc.Result{Status: 422, Body: []byte("cannot greet"), ContentType: "text/plain", Failed: true}
		}
		return &rpc.Result{Status: 500, Failed: true, Error: "retries exhausted"}
	})
	c := newClient(t, cluster, nil)
	var e *client.Error
	_, err := c.Call(ctx, "Greeter", "greet", []byte(`"fail"`))
	if !errors.As(err, &e) || e.Code != 422 || e.Source != "invocation" || e.Message != "cannot greet" || e.InvocationID == "" {
		t.Fatalf("service failure: %#v", err)
	}
	if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrNotReady) {
		t.Fatal("service failure matches a sentinel")
	}
	_, err = c.Call(ctx, "Greeter", "greet", []byte(`"x"`))
	if !errors.As(err, &e) || e.Code != 500 || e.Source != "invocation" || e.Message != "retries exhausted" {
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
	cluster := newMemCluster(nil) // invocations stay pending until finished
	c := newClient(t, cluster, nil)
	sent, err := c.Send(ctx, "Greeter", "greet", []byte(`1`), client.WithIdempotencyKey("s1"), client.WithDelay(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if sent.Status != "Accepted" || sent.ExecutionTime.IsZero() || time.Until(sent.ExecutionTime) < 80*time.Second {
		t.Fatalf("send = %+v", sent)
	}
	again, err := c.Send(ctx, "Greeter", "greet", []byte(`1`), client.WithIdempotencyKey("s1"))
	if err != nil || again.Status != "PreviouslyAccepted" || again.InvocationID != sent.InvocationID {
		t.Fatalf("second send = %+v, %v", again, err)
	}
	// Not ready yet.
	if _, err := c.Output(ctx, sent.InvocationID); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("output before completion: %v", err)
	}
	if _, err := c.OutputByKey(ctx, "Greeter", "greet", "s1"); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("output by key before completion: %v", err)
	}
	_, err = c.Attach(ctx, sent.InvocationID, client.WithTimeout(20*time.Millisecond))
	var e *client.Error
	if !errors.Is(err, client.ErrNotReady) || !errors.As(err, &e) || e.InvocationID != sent.InvocationID {
		t.Fatalf("attach timeout: %v", err)
	}
	id, _ := invocation.ParseID(sent.InvocationID)
	cluster.finish(id, &rpc.Result{Status: 200, Body: []byte("ok"), ContentType: "text/plain"})
	for _, get := range []func() (*client.Response, error){
		func() (*client.Response, error) { return c.Attach(ctx, sent.InvocationID) },
		func() (*client.Response, error) { return c.Output(ctx, sent.InvocationID) },
		func() (*client.Response, error) { return c.AttachByKey(ctx, "Greeter", "greet", "s1") },
		func() (*client.Response, error) { return c.OutputByKey(ctx, "Greeter", "greet", "s1") },
	} {
		resp, err := get()
		if err != nil || string(resp.Body) != "ok" || resp.InvocationID != sent.InvocationID || resp.IdempotencyExpires.IsZero() {
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

// blockingCluster holds every append until release is closed.
type blockingCluster struct {
	*memCluster
	entered chan struct{}
	release chan struct{}
}

func (b *blockingCluster) Append(ctx context.Context, p uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, rpc.ErrUnavailable
	}
	return b.memCluster.Append(ctx, p, inv)
}

func TestRetryAfter(t *testing.T) {
	ctx := context.Background()
	bc := &blockingCluster{memCluster: newMemCluster(echo), entered: make(chan struct{}, 1), release: make(chan struct{})}
	c := newClient(t, bc, func(cfg *ingress.Config) { cfg.MaxConcurrent = 1; cfg.RetryAfter = 2 * time.Second },
		client.WithHeader("X-Test", "1"), client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	first := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, "Greeter", "greet", nil)
		first <- err
	}()
	<-bc.entered
	_, err := c.Send(ctx, "Greeter", "greet", nil)
	var e *client.Error
	if !errors.As(err, &e) || e.Code != 429 || e.RetryAfter != 2*time.Second || e.Source != "ingress" {
		t.Fatalf("at the limit: %v", err)
	}
	close(bc.release)
	if err := <-first; err != nil {
		t.Fatalf("admitted send: %v", err)
	}
}
