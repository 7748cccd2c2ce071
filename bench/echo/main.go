package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9999", "listen address")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	st := &stats{ids: map[string]struct{}{}}
	srv := &http.Server{Handler: st, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "echo: listening on %s\n", ln.Addr())
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// stats counts deliveries by invocation id. A POST without an id (a
// readiness probe, a direct curl) is counted apart, so that deliveries
// minus distinctIds is exactly the number of repeated deliveries.
type stats struct {
	mu         sync.Mutex
	deliveries int64
	ids        map[string]struct{}
	withoutID  int64
}

func (s *stats) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/stats" {
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("content-type", "application/json")
		fmt.Fprintf(w, `{"deliveries":%d,"distinctIds":%d,"withoutId":%d}`+"\n", s.deliveries, len(s.ids), s.withoutID)
		return
	}
	if r.Method == http.MethodPost {
		s.mu.Lock()
		if id := r.Header.Get("x-restate-id"); id != "" {
			s.deliveries++
			s.ids[id] = struct{}{}
		} else {
			s.withoutID++
		}
		s.mu.Unlock()
	}
	echo(w, r)
}

// echo answers any POST with its own body; other methods get 405 so a
// misrouted health probe is visible.
func echo(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := r.Header.Get("content-type"); ct != "" {
		w.Header().Set("content-type", ct)
	}
	_, _ = w.Write(body)
}
