package ingress

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/rpc"
)

// instantDispatcher acknowledges and completes everything at once, so the
// benchmarks measure the ingress alone.
type instantDispatcher struct{}

func (instantDispatcher) Append(_ context.Context, _ uint32, inv *rpc.Invoke) (*rpc.Appended, error) {
	return &rpc.Appended{InvocationId: inv.InvocationId}, nil
}

func (instantDispatcher) Output(_ context.Context, _ uint32, id []byte) (*rpc.InvocationResult, error) {
	return &rpc.InvocationResult{InvocationId: id, Result: &rpc.Result{Status: 200, Body: []byte(`{"ok":true}`), ContentType: "application/json"}}, nil
}

func (d instantDispatcher) Attach(ctx context.Context, p uint32, id []byte) (*rpc.InvocationResult, error) {
	return d.Output(ctx, p, id)
}

// discardWriter is a reusable ResponseWriter.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

func benchRoute(b *testing.B, method, target, body string, want int) {
	h, _ := newTestHandler(b, func(c *Config) { c.Dispatcher = instantDispatcher{} })
	b.ReportAllocs()
	w := &discardWriter{h: http.Header{}}
	for b.Loop() {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		clear(w.h)
		h.ServeHTTP(w, r)
		if w.code != want {
			b.Fatalf("status %d", w.code)
		}
	}
}

func BenchmarkCall(b *testing.B) {
	benchRoute(b, "POST", "/Greeter/greet", `{"name":"ann"}`, 200)
}

func BenchmarkSend(b *testing.B) {
	benchRoute(b, "POST", "/Greeter/greet/send", `{"name":"ann"}`, 202)
}
