package testutil

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
)

// Response is an HTTP answer read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Request sends one request with client (http.DefaultClient when nil) and
// reads the whole answer. header holds name, value pairs; a nil body sends
// none.
func Request(ctx context.Context, client *http.Client, method, url string, body []byte, header ...string) (Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return Response{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Do is Request with http.DefaultClient that fails t when there is no
// answer; an empty body sends none.
func Do(t testing.TB, method, url, body string, header ...string) Response {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	r, err := Request(context.Background(), nil, method, url, b, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}
