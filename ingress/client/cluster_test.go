package client_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/server/servertest"
	"github.com/raftgate/raftgate/test/freeport"
)

// The client's tests and examples run against a real one-node raftgate
// cluster in this process (package server), started once for the package,
// which delivers to the Greeter service below on 127.0.0.1.

// ingressURL is the shared node's ingress, for every test of the package;
// greeterURL is the Greeter service's.
var ingressURL, greeterURL string

// greeter is the service every test calls.
var greeter = newGreeterService()

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	svc := httptest.NewServer(greeter)
	defer svc.Close()
	cluster, err := servertest.NewCluster(1, freeport.Client, tuneNode)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Close()
	cfg := cluster.Configs[0]
	greeterURL = svc.URL
	if err := register(cfg.AdminAddr, "Greeter", `{"url":"`+greeterURL+`","handlers":["greet"]}`); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ingressURL = "http://" + cfg.IngressAddr
	return m.Run()
}

// tuneNode gives up on a failing delivery after two quick attempts.
func tuneNode(c *server.Config) {
	c.RetryMaxAttempts = 2
	c.RetryInitialBackoff = 10 * time.Millisecond
	c.RetryMaxBackoff = 10 * time.Millisecond
	c.RetryOnMaxAttempts = "fail" // the client reports the exhausted failure
}

// register puts a service through the admin API at adminAddr.
func register(adminAddr, name, body string) error {
	req, err := http.NewRequest(http.MethodPut, "http://"+adminAddr+"/services/"+name, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("register %s: %d %s", name, resp.StatusCode, b)
	}
	return nil
}

// greeterService serves POST /Greeter/greet: it answers "hello, " and the
// body, in the request's content type. The bodies `"fail"` (422, a
// terminal failure) and `"exhaust"` (500, retried until the node gives
// up) fail; a body "hold:K" waits until release(K).
type greeterService struct {
	mu    sync.Mutex
	holds map[string]chan struct{} // guarded by mu
	// came holds the keys of the held deliveries that arrived; guarded by mu.
	came map[string]bool
}

func newGreeterService() *greeterService {
	return &greeterService{holds: map[string]chan struct{}{}, came: map[string]bool{}}
}

func (g *greeterService) hold(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.holds[key]
	if !ok {
		ch = make(chan struct{})
		g.holds[key] = ch
	}
	return ch
}

// arrived reports whether a delivery held on key reached the service.
func (g *greeterService) arrived(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.came[key]
}

// release lets the deliveries held on key answer.
func (g *greeterService) release(key string) { close(g.hold(key)) }

func (g *greeterService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/Greeter/greet" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case string(body) == `"fail"`:
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, "cannot greet")
		return
	case string(body) == `"exhaust"`:
		w.WriteHeader(http.StatusInternalServerError)
		return
	case bytes.HasPrefix(body, []byte("hold:")):
		key := string(body[len("hold:"):])
		g.mu.Lock()
		g.came[key] = true
		g.mu.Unlock()
		select {
		case <-g.hold(key):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
	w.Write(append([]byte("hello, "), body...))
}
