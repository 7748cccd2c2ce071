package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftgate/raftgate/ingress/client"
)

// A client of a node whose Greeter/greet answers "hello, " and the body:
// here the test's in-process node (TestMain), in a deployment any node's
// ingress.
func Example() {
	ctx := context.Background()

	c, err := client.New(ingressURL)
	if err != nil {
		panic(err)
	}

	// Call and wait for the result. The idempotency key makes a retry safe.
	resp, err := c.Call(ctx, "Greeter", "greet", []byte("ann"),
		client.WithContentType("text/plain"), client.WithIdempotencyKey("greet-ann"))
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Status, string(resp.Body))

	// Send without waiting, then fetch the result by id.
	sent, err := c.Send(ctx, "Greeter", "greet", []byte("bob"), client.WithContentType("text/plain"))
	if err != nil {
		panic(err)
	}
	fmt.Println(sent.Status)
	out, err := c.Attach(ctx, sent.InvocationID, client.WithTimeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out.Body))

	// Errors are typed.
	_, err = c.Call(ctx, "Nobody", "greet", nil)
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, e.Source, errors.Is(err, client.ErrNotFound))
	}
	// Output:
	// 200 hello, ann
	// Accepted
	// hello, bob
	// 404 ingress true
}

// The same against a real node: start one with `go run ./cmd/raftgate dev`
// (it registers Greeter) and point the client at its ingress. This example
// is compiled but not run by go test, as it needs that node.
func Example_devNode() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		panic(err)
	}
	resp, err := c.Call(ctx, "Greeter", "greet", []byte(`"Ada"`),
		client.WithContentType("application/json"), client.WithIdempotencyKey("greet-ada"))
	if err != nil {
		panic(err) // a *client.Error carries the HTTP status and the cluster's message
	}
	fmt.Println(resp.Status, string(resp.Body))
}
