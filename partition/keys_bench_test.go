package partition

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// handoffService answers at once and records, per key, the gap between
// answering one invocation and the next delivery of that key starting.
type handoffService struct {
	srv *httptest.Server

	mu        sync.Mutex
	answered  map[string]time.Time // key -> when its last invocation was answered
	seen      map[string]bool      // invocation ids answered
	gapSum    time.Duration
	gaps      int
	allSeen   chan struct{}
	want      int
	closeOnce sync.Once
}

func newHandoffService(tb testing.TB, want int) *handoffService {
	s := &handoffService{answered: map[string]time.Time{}, seen: map[string]bool{}, allSeen: make(chan struct{}), want: want}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, id := r.Header.Get(headerKey), r.Header.Get(headerInvocationID)
		now := time.Now()
		s.mu.Lock()
		if last, ok := s.answered[key]; ok && key != "" && !s.seen[id] {
			s.gapSum += now.Sub(last)
			s.gaps++
		}
		s.seen[id] = true
		s.answered[key] = time.Now()
		if len(s.seen) == s.want {
			s.closeOnce.Do(func() { close(s.allSeen) })
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	tb.Cleanup(s.srv.Close)
	return s
}

// BenchmarkKeyedInvocations measures invocations run per second on a
// three-node in-process cluster (real raftlog, bbolt with fsync, gRPC on
// 127.0.0.1), from the first submission until the service has answered
// every invocation: keys=1 is one hot key (serial by definition; handoff-ms
// is the mean time from the service's answer to one invocation to the
// start of the next of that key: Complete committed and applied, next
// delivery started); keys=64 spreads exclusive invocations over 64 keys;
// plain is the same load on a plain service.
func BenchmarkKeyedInvocations(b *testing.B) {
	for _, keys := range []int{1, 64, 0} {
		name := fmt.Sprintf("keys=%d", keys)
		if keys == 0 {
			name = "plain"
		}
		b.Run(name, func(b *testing.B) {
			svc := newHandoffService(b, b.N)
			c := newRaftCluster(b, 3, nil)
			kind := rpc.Service_OBJECT
			if keys == 0 {
				kind = rpc.Service_SERVICE
			}
			c.register(b, &rpc.Service{Name: "Counter", Url: svc.srv.URL, Kind: kind})
			invs := make([]*rpc.Invoke, b.N)
			for i := range invs {
				id := invocation.Random()
				inv := &rpc.Invoke{RequestId: invocation.NewRequestID(), Service: "Counter", Handler: "add", Body: []byte("1")}
				if keys > 0 {
					inv.Key = fmt.Sprint("k", i%keys)
					inv.Exclusive = true
					id = invocation.RandomKeyed("Counter", inv.Key)
				}
				inv.InvocationId = id[:]
				invs[i] = inv
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.ResetTimer()
			_, wait := c.submitting(b, ctx, invs, 64)
			wait()
			select {
			case <-svc.allSeen:
			case <-ctx.Done():
				b.Fatal("not every invocation was delivered")
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "invocations/s")
			svc.mu.Lock()
			if keys > 0 && svc.gaps > 0 {
				b.ReportMetric(float64(svc.gapSum.Microseconds())/float64(svc.gaps)/1000, "handoff-ms")
			}
			svc.mu.Unlock()
		})
	}
}
