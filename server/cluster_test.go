package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/test/freeport"
)

// This file runs the ingress API contract (docs/api.md) against a
// real three-node cluster in one test process: real raftlog with fsync'd
// bbolt, real gRPC between nodes, real memberlist, real HTTP.

// freeAddr returns an address for an in-process node (see freeport: in
// the ephemeral range another process could take it before the node binds
// it).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t, freeport.Server)
}

// startNode starts a node with cfg, logging to logger.
func startNode(cfg Config, logger zerolog.Logger) (*Server, error) {
	cfg.Logger = logger
	n, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return n, n.Start()
}

// startTestCluster starts n nodes in this process and waits until each is
// ready.
func startTestCluster(t *testing.T, n int) []*Server {
	t.Helper()
	return startTestClusterLogging(t, n, func(uint64) zerolog.Logger { return zerolog.Nop() })
}

// startTestClusterLogging is startTestCluster with each node's logger.
func startTestClusterLogging(t *testing.T, n int, logger func(id uint64) zerolog.Logger) []*Server {
	t.Helper()
	initial := map[uint64]string{}
	cfgs := make([]Config, n)
	var gossip []string
	for i := range n {
		c := DefaultConfig()
		c.NodeID = uint64(i + 1)
		c.DataDir = t.TempDir()
		c.IngressAddr, c.AdminAddr, c.NodeAddr, c.GossipAddr = freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
		c.ShutdownGrace = 2 * time.Second
		c.RequestTimeout = 5 * time.Second
		c.Partitions = 2 // fewer groups than the default: a faster test
		// Above the nodes' gRPC stream window (grpcStreamWindow), so a
		// large body exercises flow control on the dispatch and raft streams.
		c.MaxBodyBytes = 4 << 20
		initial[c.NodeID] = c.NodeAddr
		gossip = append(gossip, c.GossipAddr)
		cfgs[i] = c
	}
	nodes := make([]*Server, n)
	for i := range cfgs {
		cfgs[i].InitialCluster = initial
		cfgs[i].Join = gossip
		if err := cfgs[i].Validate(); err != nil {
			t.Fatal(err)
		}
		nd, err := startNode(cfgs[i], logger(cfgs[i].NodeID))
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		nodes[i] = nd
		t.Cleanup(func() { nd.Close() })
	}
	for _, nd := range nodes {
		testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d ready", nd.cfg.NodeID), clusterView{n: nd}.Ready)
		testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("node %d serving its ingress", nd.cfg.NodeID), nd.serving)
	}
	return nodes
}

type reply struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url, body string, header ...string) reply {
	t.Helper()
	r := testutil.Do(t, method, url, body, header...)
	return reply{r.Status, r.Header, string(r.Body)}
}

// testService echoes its input, fails with 400 for the handler "reject",
// and stalls the handler "slow" until released.
type testService struct {
	srv     *httptest.Server
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	seen    map[string]time.Time // invocation id -> first delivery
}

func newTestService(t *testing.T) *testService {
	s := &testService{release: make(chan struct{}), seen: map[string]time.Time{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		if _, ok := s.seen[r.Header.Get("x-restate-id")]; !ok {
			s.seen[r.Header.Get("x-restate-id")] = time.Now()
		}
		s.mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/reject"):
			w.Header().Set("content-type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"why":"rejected"}`))
		case strings.HasSuffix(r.URL.Path, "/slow"):
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
			w.Write(body)
		default:
			w.Header().Set("content-type", r.Header.Get("content-type"))
			w.Write(body)
		}
	}))
	t.Cleanup(func() { s.once.Do(func() { close(s.release) }); s.srv.Close() })
	return s
}

func (s *testService) firstSeen(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.seen[id]
	return at, ok
}

func TestIngressAPIOnThreeNodeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startTestCluster(t, 3)
	svc := newTestService(t)
	ingressURL := func(i int) string { return "http://" + nodes[i].cfg.IngressAddr }
	adminURL := "http://" + nodes[0].cfg.AdminAddr

	r := call(t, http.MethodPut, adminURL+"/services/Echo", `{"url":"`+svc.srv.URL+`"}`)
	if r.status/100 != 2 {
		t.Fatalf("register Echo: %d %s", r.status, r.body)
	}
	r = call(t, http.MethodPut, adminURL+"/services/Strict", `{"url":"`+svc.srv.URL+`","handlers":["only"]}`)
	if r.status/100 != 2 {
		t.Fatalf("register Strict: %d %s", r.status, r.body)
	}
	// A client that registers a service and calls it at once through
	// other nodes is not told it does not exist (registry.IngressLookup).
	r = call(t, http.MethodPut, adminURL+"/services/Fresh", `{"url":"`+svc.srv.URL+`"}`)
	if r.status/100 != 2 {
		t.Fatalf("register Fresh: %d %s", r.status, r.body)
	}
	for i := 1; i < len(nodes); i++ {
		if r := call(t, http.MethodPost, ingressURL(i)+"/Fresh/echo", `"hi"`, "content-type", "application/json"); r.status != 200 {
			t.Fatalf("call through node %d right after registering through node 1 = %d %s", i+1, r.status, r.body)
		}
	}
	for i := range nodes {
		testutil.WaitFor(t, 10*time.Second, "registry replicated", func() bool {
			_, a := nodes[i].registry.Lookup("Echo")
			_, b := nodes[i].registry.Lookup("Strict")
			return a && b
		})
	}

	t.Run("call", func(t *testing.T) {
		r := call(t, http.MethodPost, ingressURL(0)+"/Echo/echo", `{"a":1}`, "content-type", "application/json")
		if r.status != 200 || r.body != `{"a":1}` || r.header.Get("content-type") != "application/json" {
			t.Fatalf("call = %d %q %q", r.status, r.body, r.header.Get("content-type"))
		}
		if _, err := invocation.ParseID(r.header.Get("x-restate-id")); err != nil {
			t.Fatalf("x-restate-id %q: %v", r.header.Get("x-restate-id"), err)
		}
	})

	t.Run("send, idempotency, attach and output across nodes", func(t *testing.T) {
		r := call(t, http.MethodPost, ingressURL(0)+"/Echo/echo/send", `"x"`, "idempotency-key", "k-send")
		var sr struct{ InvocationID, Status string }
		json.Unmarshal([]byte(r.body), &sr)
		if r.status != 202 || sr.Status != "Accepted" || r.header.Get("x-restate-id") != sr.InvocationID {
			t.Fatalf("send = %d %s", r.status, r.body)
		}
		r = call(t, http.MethodPost, ingressURL(1)+"/Echo/echo/send", `"y"`, "idempotency-key", "k-send")
		var again struct{ InvocationID, Status string }
		json.Unmarshal([]byte(r.body), &again)
		if r.status != 202 || again.Status != "PreviouslyAccepted" || again.InvocationID != sr.InvocationID {
			t.Fatalf("repeat send = %d %s, want PreviouslyAccepted %s", r.status, r.body, sr.InvocationID)
		}
		r = call(t, http.MethodGet, ingressURL(2)+"/restate/invocation/"+sr.InvocationID+"/attach", "")
		if r.status != 200 || r.body != `"x"` {
			t.Fatalf("attach via node 3 = %d %s", r.status, r.body)
		}
		r = call(t, http.MethodGet, ingressURL(1)+"/restate/invocation/"+sr.InvocationID+"/output", "")
		if r.status != 200 || r.body != `"x"` {
			t.Fatalf("output = %d %s", r.status, r.body)
		}
		for _, suffix := range []string{"attach", "output"} {
			r = call(t, http.MethodGet, ingressURL(2)+"/restate/invocation/Echo/echo/k-send/"+suffix, "")
			if r.status != 200 || r.body != `"x"` || r.header.Get("idempotency-expires") == "" {
				t.Fatalf("%s by key = %d %s (idempotency-expires %q)", suffix, r.status, r.body, r.header.Get("idempotency-expires"))
			}
		}
		// A call with the same key returns the original result.
		r = call(t, http.MethodPost, ingressURL(2)+"/Echo/echo", `"z"`, "idempotency-key", "k-send")
		if r.status != 200 || r.body != `"x"` || r.header.Get("x-restate-id") != sr.InvocationID {
			t.Fatalf("call with a used key = %d %s", r.status, r.body)
		}
	})

	t.Run("request to node 1 for a partition led by node 3", func(t *testing.T) {
		var led uint32
		testutil.WaitFor(t, 10*time.Second, "a partition led by node 3", func() bool {
			for _, p := range (clusterView{n: nodes[2]}).Partitions(false) {
				if p.ID > 0 && p.Leader == 3 {
					led = p.ID
					return true
				}
			}
			// Node 3 leads none: move partition 1 there from its leader.
			for _, nd := range nodes[:2] {
				if g := nd.raft.Group(1); g.Status().IsLeader {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					g.TransferLeadership(ctx, 3)
					cancel()
				}
			}
			return false
		})
		key := keyForPartition(t, "Echo", "echo", led, nodes[0].cfg.Partitions)
		r := call(t, http.MethodPost, ingressURL(0)+"/Echo/echo", `"far"`, "idempotency-key", key)
		if r.status != 200 || r.body != `"far"` {
			t.Fatalf("call routed to partition %d on node 3 = %d %s", led, r.status, r.body)
		}
	})

	t.Run("delayed send", func(t *testing.T) {
		before := time.Now()
		r := call(t, http.MethodPost, ingressURL(0)+"/Echo/echo/send?delay=PT1S", `"later"`)
		var sr struct{ InvocationID, ExecutionTime string }
		json.Unmarshal([]byte(r.body), &sr)
		exec, err := time.Parse(time.RFC3339, sr.ExecutionTime)
		if r.status != 202 || err != nil || exec.Before(before.Add(900*time.Millisecond)) {
			t.Fatalf("delayed send = %d %s", r.status, r.body)
		}
		r = call(t, http.MethodGet, ingressURL(1)+"/restate/invocation/"+sr.InvocationID+"/attach", "")
		if r.status != 200 || r.body != `"later"` {
			t.Fatalf("attach delayed = %d %s", r.status, r.body)
		}
		if at, ok := svc.firstSeen(sr.InvocationID); !ok || at.Before(before.Add(time.Second-50*time.Millisecond)) {
			t.Fatalf("delayed invocation ran at %v, %v after the send; want >= 1s", ok, at.Sub(before))
		}
		r = call(t, http.MethodPost, ingressURL(0)+"/Echo/echo?delay=1s", `"x"`)
		if r.status != 400 {
			t.Fatalf("delay on a plain call = %d, want 400", r.status)
		}
	})

	t.Run("not ready, client timeout, then the result", func(t *testing.T) {
		r := call(t, http.MethodPost, ingressURL(0)+"/Echo/slow/send", `"s"`)
		var sr struct{ InvocationID string }
		json.Unmarshal([]byte(r.body), &sr)
		r = call(t, http.MethodGet, ingressURL(1)+"/restate/invocation/"+sr.InvocationID+"/output", "")
		if r.status != 470 {
			t.Fatalf("output of a running invocation = %d %s, want 470", r.status, r.body)
		}
		r = call(t, http.MethodGet, ingressURL(2)+"/restate/invocation/"+sr.InvocationID+"/attach?timeout=200ms", "")
		if r.status != 470 || r.header.Get("x-restate-id") != sr.InvocationID {
			t.Fatalf("attach past its timeout = %d %s (x-restate-id %q)", r.status, r.body, r.header.Get("x-restate-id"))
		}
		r = call(t, http.MethodPost, ingressURL(0)+"/Echo/slow", `"c"`, "x-raftgate-timeout", "200ms")
		if r.status != 470 || r.header.Get("x-restate-id") == "" {
			t.Fatalf("call past its timeout = %d %s", r.status, r.body)
		}
		svc.once.Do(func() { close(svc.release) })
		r = call(t, http.MethodGet, ingressURL(2)+"/restate/invocation/"+sr.InvocationID+"/attach", "")
		if r.status != 200 || r.body != `"s"` {
			t.Fatalf("attach after release = %d %s", r.status, r.body)
		}
	})

	t.Run("a body larger than the gRPC windows", func(t *testing.T) {
		// 3 MiB: three times a stream window. Through every node, so it
		// crosses the dispatch stream to the partition's leader (unless
		// local) and, inside a log entry, the raft streams to the followers.
		big := strings.Repeat("b", 3<<20)
		for i := range nodes {
			r := call(t, http.MethodPost, ingressURL(i)+"/Echo/echo", big)
			if r.status != 200 || r.body != big {
				t.Fatalf("3 MiB call through node %d = %d, %d bytes back", i+1, r.status, len(r.body))
			}
		}
	})

	t.Run("a service's 4xx is the recorded result", func(t *testing.T) {
		r := call(t, http.MethodPost, ingressURL(0)+"/Echo/reject", `"r"`)
		if r.status != 400 || r.body != `{"why":"rejected"}` || r.header.Get("x-restate-error-source") != "invocation" {
			t.Fatalf("rejected call = %d %s (source %q)", r.status, r.body, r.header.Get("x-restate-error-source"))
		}
		r2 := call(t, http.MethodGet, ingressURL(1)+"/restate/invocation/"+r.header.Get("x-restate-id")+"/output", "")
		if r2.status != 400 || r2.body != r.body {
			t.Fatalf("output of the rejected invocation = %d %s", r2.status, r2.body)
		}
	})

	t.Run("errors", func(t *testing.T) {
		cases := []struct {
			name, method, path, body string
			header                   []string
			status                   int
		}{
			{"malformed id", "GET", "/restate/invocation/inv_nope/output", "", nil, 400},
			{"unknown invocation", "GET", "/restate/invocation/" + invocation.Random().String() + "/output", "", nil, 404},
			{"unknown service", "POST", "/Nope/echo", `"x"`, nil, 404},
			{"unknown handler", "POST", "/Strict/other", `"x"`, nil, 404},
			{"wrong method", "PUT", "/Echo/echo", `"x"`, nil, 405},
			{"body over the limit", "POST", "/Echo/echo", strings.Repeat("a", 5<<20), nil, 413},
			{"invalid JSON", "POST", "/Echo/echo", `{nope`, []string{"content-type", "application/json"}, 400},
			{"malformed delay", "POST", "/Echo/echo/send?delay=soon", `"x"`, nil, 400},
		}
		for _, c := range cases {
			r := call(t, c.method, ingressURL(1)+c.path, c.body, c.header...)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Source  string `json:"source"`
			}
			if err := json.Unmarshal([]byte(r.body), &e); r.status != c.status || err != nil || e.Code != c.status || e.Source != "ingress" || e.Message == "" {
				t.Errorf("%s: %d %s, want %d with a JSON error from the ingress", c.name, r.status, r.body, c.status)
			}
			if r.header.Get("x-restate-error-source") != "ingress" {
				t.Errorf("%s: x-restate-error-source %q", c.name, r.header.Get("x-restate-error-source"))
			}
		}
		unknownSvc := call(t, "POST", ingressURL(1)+"/Nope/echo", `"x"`)
		unknownHandler := call(t, "POST", ingressURL(1)+"/Strict/other", `"x"`)
		if unknownSvc.body == unknownHandler.body {
			t.Errorf("unknown service and unknown handler have the same message: %s", unknownSvc.body)
		}
		if r := call(t, "GET", ingressURL(2)+"/restate/health", ""); r.status != 200 {
			t.Errorf("health = %d", r.status)
		}
	})

	t.Run("admin", func(t *testing.T) {
		r := call(t, "GET", adminURL+"/cluster", "")
		var view admin.ClusterView
		if err := json.Unmarshal([]byte(r.body), &view); r.status != 200 || err != nil || len(view.Nodes) != 3 || len(view.Partitions) != int(nodes[0].cfg.Partitions)+1 {
			t.Fatalf("/cluster = %d %s", r.status, r.body)
		}
		for _, p := range view.Partitions {
			if p.StateDigest != "" {
				t.Fatalf("/cluster without ?digest=1 hashed partition %d", p.ID)
			}
		}
		r = call(t, "GET", adminURL+"/cluster?digest=1", "")
		if err := json.Unmarshal([]byte(r.body), &view); err != nil || len(view.Partitions) == 0 {
			t.Fatalf("/cluster?digest=1 = %d %s", r.status, r.body)
		}
		for _, p := range view.Partitions {
			if len(p.StateDigest) != 64 || p.DigestIndex == 0 {
				t.Fatalf("/cluster?digest=1: partition %d digest %q at %d", p.ID, p.StateDigest, p.DigestIndex)
			}
		}
		send := call(t, http.MethodPost, ingressURL(0)+"/Echo/echo/send?delay=1h", `"c"`)
		id := send.header.Get("x-restate-id")
		if r := call(t, "GET", adminURL+"/invocations/"+id, ""); r.status != 200 || !strings.Contains(r.body, "pending") {
			t.Fatalf("status of a delayed invocation = %d %s", r.status, r.body)
		}
		if r := call(t, "DELETE", adminURL+"/invocations/"+id, ""); r.status/100 != 2 {
			t.Fatalf("cancel = %d %s", r.status, r.body)
		}
		r = call(t, "GET", ingressURL(2)+"/restate/invocation/"+id+"/output", "")
		if r.status != 409 || r.header.Get("x-restate-error-source") != "invocation" {
			t.Fatalf("output of a cancelled invocation = %d %s", r.status, r.body)
		}
		if r := call(t, "GET", adminURL+"/metrics", ""); r.status != 200 || !bytes.Contains([]byte(r.body), []byte("raftgate_ingress_requests_total")) {
			t.Fatalf("/metrics = %d", r.status)
		}
	})
}

// keyForPartition finds an idempotency key whose invocation lands on
// partition p.
func keyForPartition(t *testing.T, service, handler string, p, n uint32) string {
	for i := range 100000 {
		k := fmt.Sprintf("k-%d", i)
		if invocation.PartitionFor(invocation.Idempotent(service, handler, k).PartitionKey(), n) == p {
			return k
		}
	}
	t.Fatalf("no key for partition %d", p)
	return ""
}

// TestLeadershipChangesUnderLoad: while 32 clients send and call, the
// leadership of every partition moves twice and then one node stops
// without handing its leadership over. Clients may see only successes or
// retry-safe 503s (and connection errors from the stopped node, which they
// retry elsewhere), and every acknowledged invocation has its own result.
func TestLeadershipChangesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startTestCluster(t, 3)
	svc := newTestService(t)
	r := call(t, http.MethodPut, "http://"+nodes[0].cfg.AdminAddr+"/services/Echo", `{"url":"`+svc.srv.URL+`"}`)
	if r.status/100 != 2 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	for i := range nodes {
		testutil.WaitFor(t, 10*time.Second, "registry replicated", func() bool { _, ok := nodes[i].registry.Lookup("Echo"); return ok })
	}

	var (
		mu      sync.Mutex
		acked   = map[string]string{} // invocation id -> payload
		bad     []string
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		stopped = make([]bool, len(nodes))
	)
	alive := func(i int) bool { mu.Lock(); defer mu.Unlock(); return !stopped[i] }
	client := &http.Client{Timeout: 30 * time.Second}
	for c := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := fmt.Sprintf(`"c%d-%d"`, c, seq)
				key := fmt.Sprintf("c%d-%d", c, seq)
				path := "/Echo/echo/send"
				if seq%2 == 1 {
					path = "/Echo/echo"
				}
				for attempt := 0; ; attempt++ {
					i := (c + attempt) % len(nodes)
					if !alive(i) {
						continue
					}
					req, _ := http.NewRequest(http.MethodPost, "http://"+nodes[i].cfg.IngressAddr+path, strings.NewReader(payload))
					req.Header.Set("idempotency-key", key)
					resp, err := client.Do(req)
					if err != nil {
						continue // the node is stopping; retry elsewhere
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					id := resp.Header.Get("x-restate-id")
					switch {
					case resp.StatusCode == 202 || resp.StatusCode == 200:
						mu.Lock()
						acked[id] = payload
						if resp.StatusCode == 200 && string(body) != payload {
							bad = append(bad, fmt.Sprintf("call %s answered %s, want %s", id, body, payload))
						}
						mu.Unlock()
					case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
						continue
					default:
						mu.Lock()
						bad = append(bad, fmt.Sprintf("%s via node %d: %d %s", path, i+1, resp.StatusCode, body))
						mu.Unlock()
					}
					break
				}
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	progress := func(what string) {
		before := count()
		testutil.WaitFor(t, 20*time.Second, what, func() bool { return count() >= before+100 })
	}
	progress("load before any change")
	for round := range 2 {
		for p := uint32(1); p <= nodes[0].cfg.Partitions; p++ {
			for _, nd := range nodes {
				if g := nd.raft.Group(raftlog.GroupID(p)); g.Status().IsLeader {
					to := g.Status().Leader%3 + 1
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					if err := g.TransferLeadership(ctx, to); err != nil {
						t.Logf("round %d: transfer of partition %d to node %d: %v", round, p, to, err)
					}
					cancel()
				}
			}
		}
		progress(fmt.Sprintf("load after leadership round %d", round))
	}
	// Stop the leader of partition 1 without handing leadership over.
	victim := 0
	for i, nd := range nodes {
		if nd.raft.Group(1).Status().IsLeader {
			victim = i
		}
	}
	mu.Lock()
	stopped[victim] = true
	mu.Unlock()
	nodes[victim].closeAll()
	progress("load after a leader stopped")
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	survivor := nodes[(victim+1)%len(nodes)]
	for id, payload := range acked {
		r := call(t, http.MethodGet, "http://"+survivor.cfg.IngressAddr+"/restate/invocation/"+id+"/attach?timeout=20s", "")
		if r.status != 200 || r.body != payload {
			t.Errorf("acknowledged %s: attach = %d %s, want 200 %s", id, r.status, r.body, payload)
		}
	}
	t.Logf("%d acknowledged invocations, all with their own result", len(acked))
}

// TestShutdownAnswersWaitingCallers: a caller long-polling when its node
// shuts down gets a retry-safe 503 with Retry-After before the grace ends,
// not a dropped connection.
func TestShutdownAnswersWaitingCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	nodes := startTestCluster(t, 1)
	nd := nodes[0]
	svc := newTestService(t)
	if r := call(t, http.MethodPut, "http://"+nd.cfg.AdminAddr+"/services/Echo", `{"url":"`+svc.srv.URL+`"}`); r.status/100 != 2 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	testutil.WaitFor(t, 10*time.Second, "registry", func() bool { _, ok := nd.registry.Lookup("Echo"); return ok })
	send := call(t, http.MethodPost, "http://"+nd.cfg.IngressAddr+"/Echo/slow/send", `"s"`)
	id := send.header.Get("x-restate-id")
	if send.status != 202 || id == "" {
		t.Fatalf("send = %d %s", send.status, send.body)
	}
	type answer struct {
		status     int
		retryAfter string
		err        error
	}
	attached := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + nd.cfg.IngressAddr + "/restate/invocation/" + id + "/attach")
		if err != nil {
			attached <- answer{err: err}
			return
		}
		resp.Body.Close()
		attached <- answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	}()
	testutil.WaitFor(t, 10*time.Second, "the attach waiting at its partition", func() bool { return attachWaiters(t, nd) > 0 })
	start := time.Now()
	if err := nd.Close(); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	a := <-attached
	if a.err != nil || a.status != http.StatusServiceUnavailable || a.retryAfter == "" {
		t.Fatalf("attach during shutdown = %d (Retry-After %q, error %v), want 503 with Retry-After", a.status, a.retryAfter, a.err)
	}
	if took := time.Since(start); took > nd.cfg.ShutdownGrace+time.Second {
		t.Fatalf("shutdown took %v, grace %v", took, nd.cfg.ShutdownGrace)
	}
}

// attachWaiters sums raftgate_partition_attach_waiters from nd's /metrics.
func attachWaiters(t *testing.T, nd *Server) int {
	r := call(t, http.MethodGet, "http://"+nd.cfg.AdminAddr+"/metrics", "")
	n := 0
	for _, line := range strings.Split(r.body, "\n") {
		if strings.HasPrefix(line, "raftgate_partition_attach_waiters{") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			n += int(v)
		}
	}
	return n
}
