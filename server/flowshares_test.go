package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/server/servertest"
	"github.com/raftgate/raftgate/test/freeport"
)

// recordingService counts the calls it has in flight; a call returns
// once released (release closed), or at once if hold is false.
type recordingService struct {
	srv     *httptest.Server
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	now     int
	max     int
	done    map[string]bool // invocation ids answered
}

func newRecordingService(t *testing.T, hold bool) *recordingService {
	s := &recordingService{release: make(chan struct{}), done: map[string]bool{}}
	if !hold {
		s.unblock()
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.now++
		s.max = max(s.max, s.now)
		s.mu.Unlock()
		time.Sleep(50 * time.Millisecond) // the service's work: calls overlap
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
		s.mu.Lock()
		s.now--
		if r.Context().Err() == nil {
			s.done[r.Header.Get("X-Restate-Id")] = true
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.srv.Close)
	t.Cleanup(s.unblock) // first: a failed test leaves no call held
	return s
}

func (s *recordingService) unblock() { s.once.Do(func() { close(s.release) }) }

func (s *recordingService) figures() (maxInFlight, done int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, len(s.done)
}

// flowCluster starts three nodes with four partitions and registers the
// keyed service Limited (handler get shared) with concurrency limit and
// an attempt timeout longer than any test.
func flowCluster(t *testing.T, svc *recordingService, limit int) []server.Config {
	_, cfgs := servertest.StartCluster(t, 3, freeport.Server, func(c *server.Config) { c.Partitions = 4 })
	r := testutil.Do(t, http.MethodPut, "http://"+cfgs[0].AdminAddr+"/services/Limited",
		fmt.Sprintf(`{"url":%q,"kind":"object","shared":["get"],"limits":{"concurrency":%d},"retry":{"attemptTimeout":"10m"}}`, svc.srv.URL, limit))
	if r.Status/100 != 2 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	return cfgs
}

// send sends Limited/key/get through node i's ingress.
func send(t *testing.T, cfgs []server.Config, i int, key string) {
	t.Helper()
	r := testutil.Do(t, http.MethodPost, "http://"+cfgs[i%len(cfgs)].IngressAddr+"/Limited/"+key+"/get/send", `""`)
	if r.Status != http.StatusAccepted && r.Status != http.StatusOK {
		t.Fatalf("send %s: %d %s", key, r.Status, r.Body)
	}
}

// TestFlowSharesLimitBelowPartitions: concurrency 1 over four partitions
// holds exactly (the static split gave each partition at least one), and
// the one share travels to where the work waits until all is done.
func TestFlowSharesLimitBelowPartitions(t *testing.T) {
	svc := newRecordingService(t, false)
	cfgs := flowCluster(t, svc, 1)
	seen := map[uint32]bool{}
	const sends = 16
	for i := range sends {
		key := fmt.Sprintf("k%d", i)
		seen[invocation.PartitionFor(invocation.KeyedPartitionKey("Limited", key), 4)] = true
		send(t, cfgs, i, key)
	}
	if len(seen) < 3 {
		t.Fatalf("the keys fall in %d partitions only", len(seen))
	}
	testutil.WaitFor(t, 90*time.Second, "every send answered", func() bool {
		_, done := svc.figures()
		return done >= sends
	})
	if most, _ := svc.figures(); most != 1 {
		t.Fatalf("%d calls in flight at once, limit 1", most)
	}
}

// TestFlowSharesMoveToTheBusyPartition: with concurrency 3 and work in
// one partition only, the idle partitions' shares move to it and it
// reaches 3 in flight, never more.
func TestFlowSharesMoveToTheBusyPartition(t *testing.T) {
	svc := newRecordingService(t, true)
	cfgs := flowCluster(t, svc, 3)
	var keys []string
	for i := 0; len(keys) < 6; i++ {
		key := fmt.Sprintf("k%d", i)
		// Partition 4's static share of 3 is 0: it must get all three.
		if invocation.PartitionFor(invocation.KeyedPartitionKey("Limited", key), 4) == 4 {
			keys = append(keys, key)
		}
	}
	for i, key := range keys {
		send(t, cfgs, i, key)
	}
	// Well within the attempt timeout: no call ends before.
	testutil.WaitFor(t, 60*time.Second, "3 calls in flight", func() bool {
		most, _ := svc.figures()
		return most >= 3
	})
	svc.unblock()
	testutil.WaitFor(t, 60*time.Second, "every send answered", func() bool {
		_, done := svc.figures()
		return done >= len(keys)
	})
	if most, _ := svc.figures(); most != 3 {
		t.Fatalf("%d calls in flight at once, limit 3", most)
	}
}
