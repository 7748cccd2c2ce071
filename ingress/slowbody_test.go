package ingress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// serveReal serves h over real HTTP on 127.0.0.1, signalling on entered
// each request that carries the header x-test-slow once its headers are
// read.
func serveReal(t *testing.T, h http.Handler) (srv *httptest.Server, entered chan struct{}) {
	t.Helper()
	entered = make(chan struct{}, 16)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-test-slow") != "" {
			entered <- struct{}{}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, entered
}

// startSlowBody opens a connection that announces a 100-byte body and
// sends 3 bytes of it.
func startSlowBody(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_, err = io.WriteString(conn, "POST /Greeter/greet HTTP/1.1\r\nHost: ingress\r\nx-test-slow: 1\r\n"+
		"Content-Type: text/plain\r\nContent-Length: 100\r\n\r\nabc")
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSlowBodyHoldsNoSlot (issue 15, item 1): clients that trickle their
// bodies neither hold the concurrency slots normal requests need nor stay
// open past BodyReadTimeout.
func TestSlowBodyHoldsNoSlot(t *testing.T) {
	const bodyTimeout = 1500 * time.Millisecond
	h, fd := newTestHandler(t, func(c *Config) { c.MaxConcurrent = 2; c.BodyReadTimeout = bodyTimeout })
	fd.complete = echoResult
	srv, entered := serveReal(t, h)
	addr := strings.TrimPrefix(srv.URL, "http://")

	var slow []net.Conn
	for range 3 {
		slow = append(slow, startSlowBody(t, addr))
		<-entered
	}
	started := time.Now()
	for i := range 5 {
		resp, err := http.Post(srv.URL+"/Greeter/greet", "text/plain", strings.NewReader("hi"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hi" {
			t.Fatalf("normal request %d while 3 bodies trickle with --max-concurrent 2: %d %s", i, resp.StatusCode, b)
		}
	}
	if time.Since(started) >= bodyTimeout {
		t.Fatalf("normal requests took %v: they only passed once the slow bodies timed out", time.Since(started))
	}

	for i, conn := range slow {
		if err := conn.SetReadDeadline(time.Now().Add(bodyTimeout + 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("slow body %d: no answer: %v", i, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(msg), "within 1.5s") {
			t.Fatalf("slow body %d: %d %s, want 408 naming the limit", i, resp.StatusCode, msg)
		}
		if !resp.Close {
			t.Errorf("slow body %d: the connection is kept open after a timed-out body", i)
		}
	}
	if n := fd.appendCount(); n != 5 {
		t.Errorf("%d appends, want the 5 normal requests only", n)
	}
}

// TestBodyDeadlineEndsWithTheBody: the read deadline covers the body only;
// a call that waits for its result longer than BodyReadTimeout gets it.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	const bodyTimeout = 200 * time.Millisecond
	h, fd := newTestHandler(t, func(c *Config) { c.BodyReadTimeout = bodyTimeout })
	fd.attaching = make(chan invocation.ID, 1)
	srv, _ := serveReal(t, h)
	go func() {
		id := <-fd.attaching
		<-time.After(3 * bodyTimeout) // the service answers after the body deadline would have passed
		fd.finish(id, &rpc.Result{Status: 200, Body: []byte("late")})
	}()
	resp, err := http.Post(srv.URL+"/Greeter/greet", "text/plain", strings.NewReader("hi"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "late" {
		t.Fatalf("call answered after the body deadline: %d %s", resp.StatusCode, b)
	}
}
