package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
)

// counterService is a virtual object Counter: add counts the invocation
// (by x-restate-id, so a redelivery counts once), get answers the count.
// It records, per key, the order in which invocations first started and
// whether each started only after the one before it had been answered.
type counterService struct {
	srv *httptest.Server

	mu         sync.Mutex
	applied    map[string]map[string]bool // key -> invocation ids counted
	order      map[string][]string        // key -> bodies in first-start order
	lastStart  map[string]string          // key -> id of the last invocation to start
	answered   map[string]bool            // invocation id -> answered at least once
	violations []string
}

func newCounterService(t *testing.T) *counterService {
	s := &counterService{applied: map[string]map[string]bool{}, order: map[string][]string{},
		lastStart: map[string]string{}, answered: map[string]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *counterService) serve(w http.ResponseWriter, r *http.Request) {
	var body string
	_ = json.NewDecoder(r.Body).Decode(&body)
	id, key := r.Header.Get("x-restate-id"), r.Header.Get("x-raftgate-key")
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "" {
		s.violations = append(s.violations, "no x-raftgate-key on "+r.URL.Path)
	}
	switch r.URL.Path {
	case "/Counter/add":
		if s.applied[key] == nil {
			s.applied[key] = map[string]bool{}
		}
		if !s.applied[key][id] {
			if prev := s.lastStart[key]; prev != "" && !s.answered[prev] {
				s.violations = append(s.violations, fmt.Sprintf("key %s: %s (%s) started before %s was answered", key, id, body, prev))
			}
			s.lastStart[key] = id
			s.order[key] = append(s.order[key], body)
			s.applied[key][id] = true
		}
		s.answered[id] = true
		fmt.Fprint(w, len(s.applied[key]))
	case "/Counter/get":
		fmt.Fprint(w, len(s.applied[key]))
	default:
		http.NotFound(w, r)
	}
}

// registerKind registers a service of the given kind and waits until every
// node's admin API shows it.
func (c *cluster) registerKind(name, url, kind string, shared ...string) {
	c.t.Helper()
	body, _ := json.Marshal(map[string]any{"url": url, "kind": kind, "shared": shared})
	testutil.WaitFor(c.t, 20*time.Second, "service registration", func() bool {
		r, err := do(context.Background(), http.MethodPut, c.nodes[0].adminURL()+"/services/"+name, body, nil)
		return err == nil && r.status/100 == 2
	})
	for _, m := range c.nodes {
		testutil.WaitFor(c.t, 10*time.Second, fmt.Sprintf("node %d sees service %s", m.id, name), func() bool {
			r, err := do(context.Background(), http.MethodGet, m.adminURL()+"/services/"+name, nil, nil)
			var v struct{ Kind string }
			return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &v) == nil && v.Kind == kind
		})
	}
}

// postUntilAnswered posts through the nodes in turn until an answer other
// than a retry-safe 503/429 or a connection error comes (a careful client:
// the idempotency key or the workflow id makes the retry the same request).
func postUntilAnswered(ctx context.Context, c *cluster, start int, path, body string, header map[string]string) (*response, error) {
	b, _ := json.Marshal(body)
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n := c.nodes[(start+attempt)%len(c.nodes)]
		reqCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		r, err := do(reqCtx, http.MethodPost, n.ingressURL()+path, b, header)
		cancel()
		if err != nil || r.status == http.StatusServiceUnavailable || r.status == http.StatusTooManyRequests {
			continue
		}
		return r, nil
	}
}

// attachUntilDone GETs path through the nodes in turn until it answers 200.
func attachUntilDone(ctx context.Context, c *cluster, start int, path string) error {
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n := c.nodes[(start+attempt)%len(c.nodes)]
		r, err := do(ctx, http.MethodGet, n.ingressURL()+path, nil, nil)
		switch {
		case err != nil, r.status == http.StatusServiceUnavailable, r.status == http.StatusTooManyRequests:
			continue
		case r.status != http.StatusOK:
			return fmt.Errorf("attach %s: %d %s", path, r.status, r.body)
		}
		return nil
	}
}

// leaderOf returns the node leading partition p, as node 0..n see it.
func (c *cluster) leaderOf(p uint32) *node {
	for _, n := range c.nodes {
		r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/cluster", nil, nil)
		if err != nil || r.status != http.StatusOK {
			continue
		}
		var view struct {
			Partitions []struct {
				ID     uint32 `json:"id"`
				Leader int    `json:"leader"`
			} `json:"partitions"`
		}
		if json.Unmarshal(r.body, &view) != nil {
			continue
		}
		for _, ps := range view.Partitions {
			if ps.ID == p && ps.Leader > 0 && ps.Leader <= len(c.nodes) {
				return c.nodes[ps.Leader-1]
			}
		}
	}
	return nil
}

const keyedPartitions = 2

func partitionOfKey(service, key string) uint32 {
	return invocation.PartitionFor(invocation.KeyedPartitionKey(service, key), keyedPartitions)
}

// TestKeyedCountersUnderLeaderKills: 32 clients send increments to four
// counter keys through three nodes while the leader of a key's partition
// is killed every few seconds; every tenth increment each client attaches
// to by idempotency key, which bounds the backlog. Each key's increments
// start in the order
// they were acknowledged per client, each only after the one before it was
// answered, and every counter ends at exactly its acknowledged increments.
func TestKeyedCountersUnderLeaderKills(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: keyedPartitions})
	svc := newCounterService(t)
	c.registerKind("Counter", svc.srv.URL, "object", "get")
	keys := []string{"apples", "pears", "plums", "figs"}

	type acked struct {
		client, seq int
		id          string
	}
	var mu sync.Mutex
	acks := map[string][]acked{} // key -> acknowledged increments
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for client := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := keys[client%len(keys)]
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := fmt.Sprintf("c%d-%d", client, seq)
				r, err := postUntilAnswered(ctx, c, client, "/Counter/"+key+"/add/send", payload, map[string]string{"idempotency-key": payload})
				if err != nil {
					t.Errorf("client %d: %v", client, err)
					return
				}
				if r.status != http.StatusAccepted {
					t.Errorf("client %d: %d %s", client, r.status, r.body)
					return
				}
				mu.Lock()
				acks[key] = append(acks[key], acked{client, seq, r.header.Get("x-restate-id")})
				mu.Unlock()
				if seq%10 == 9 {
					// Bound the backlog: wait for this increment's result,
					// attached by idempotency key.
					if err := attachUntilDone(ctx, c, client, "/restate/invocation/Counter/"+key+"/add/"+payload+"/attach"); err != nil {
						t.Errorf("client %d: %v", client, err)
						return
					}
				}
			}
		}()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range acks {
			n += len(a)
		}
		return n
	}
	for round := range 3 {
		// Fault cadence: a kill every few seconds, each after progress.
		before := count()
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		testutil.WaitFor(t, 20*time.Second, "progress before a kill", func() bool { return count() >= before+100 })
		victim := c.leaderOf(partitionOfKey("Counter", keys[round%len(keys)]))
		if victim == nil {
			t.Fatal("no leader known")
		}
		c.kill(victim)
		t.Logf("killed node %d (leader of %s's partition); %d acknowledged", victim.id, keys[round%len(keys)], count())
		before = count()
		testutil.WaitFor(t, 20*time.Second, "progress after the kill", func() bool { return count() >= before+100 })
		c.restart(victim)
	}
	close(stop)
	wg.Wait()

	// Wait until every key is idle: all its invocations have results.
	for _, key := range keys {
		testutil.WaitFor(t, 60*time.Second, "key "+key+" idle", func() bool {
			r, err := do(ctx, http.MethodGet, c.nodes[0].adminURL()+"/objects/Counter/"+key, nil, nil)
			var v struct {
				Running string
				Queued  int
			}
			return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &v) == nil && v.Running == "" && v.Queued == 0
		})
	}
	svc.mu.Lock()
	violations := slices.Clone(svc.violations)
	svc.mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	total := 0
	for _, key := range keys {
		r, err := postUntilAnswered(ctx, c, 0, "/Counter/"+key+"/get", "", nil)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("get %s: %v %v", key, r, err)
		}
		got, _ := strconv.Atoi(string(r.body))
		mu.Lock()
		want := acks[key]
		mu.Unlock()
		total += len(want)
		if got != len(want) {
			t.Errorf("counter %s = %d, want %d acknowledged increments", key, got, len(want))
		}
		ids := map[string]bool{}
		for _, a := range want {
			if ids[a.id] {
				t.Errorf("counter %s: two acknowledged increments share id %s", key, a.id)
			}
			ids[a.id] = true
		}
		svc.mu.Lock()
		for _, a := range want {
			if !svc.applied[key][a.id] {
				t.Errorf("counter %s: acknowledged %s (c%d-%d) not counted", key, a.id, a.client, a.seq)
			}
		}
		// Per client, increments started in the order they were sent.
		last := map[string]int{}
		for _, body := range svc.order[key] {
			var client, seq int
			fmt.Sscanf(body, "c%d-%d", &client, &seq)
			cl := strconv.Itoa(client)
			if prev, ok := last[cl]; ok && seq <= prev {
				t.Errorf("counter %s: client %d's increment %d started after its increment %d", key, client, seq, prev)
			}
			last[cl] = seq
		}
		svc.mu.Unlock()
	}
	t.Logf("%d increments acknowledged and counted once each across 3 leader kills", total)
}

// workflowService counts the runs of each workflow id by invocation id.
type workflowService struct {
	srv  *httptest.Server
	mu   sync.Mutex
	runs map[string]map[string]int // workflow id -> invocation id -> deliveries
}

func newWorkflowService(t *testing.T) *workflowService {
	s := &workflowService{runs: map[string]map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("x-raftgate-key")
		switch r.URL.Path {
		case "/Signup/run":
			s.mu.Lock()
			if s.runs[key] == nil {
				s.runs[key] = map[string]int{}
			}
			s.runs[key][r.Header.Get("x-restate-id")]++
			s.mu.Unlock()
			fmt.Fprintf(w, "welcome %s", key)
		case "/Signup/status":
			fmt.Fprintf(w, "status of %s", key)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// TestWorkflowRunOncePerIDAcrossFailover: runs of one workflow id sent
// through every node, before and after its partition's leader is killed,
// are one invocation with one result; a second call is 409, a second send
// PreviouslyAccepted, and attach/output by workflow id read the result.
func TestWorkflowRunOncePerIDAcrossFailover(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: keyedPartitions})
	svc := newWorkflowService(t)
	c.registerKind("Signup", svc.srv.URL, "workflow")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids := []string{"ann", "bob", "cy"}

	sendAll := func(wid string, wantStatus ...string) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range c.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := postUntilAnswered(ctx, c, i, "/Signup/"+wid+"/run/send", "go", nil)
				if err != nil || r.status != http.StatusAccepted {
					t.Errorf("send %s via node %d: %v %v", wid, i+1, r, err)
					return
				}
				var sr sendResult
				_ = json.Unmarshal(r.body, &sr)
				if want := invocation.WorkflowRun("Signup", wid).String(); sr.InvocationID != want {
					t.Errorf("send %s: id %s, want %s", wid, sr.InvocationID, want)
				}
				if !slices.Contains(wantStatus, sr.Status) {
					t.Errorf("send %s: status %s, want one of %v", wid, sr.Status, wantStatus)
				}
			}()
		}
		wg.Wait()
	}
	for _, wid := range ids {
		sendAll(wid, "Accepted", "PreviouslyAccepted")
	}
	victim := c.leaderOf(partitionOfKey("Signup", ids[0]))
	if victim == nil {
		t.Fatal("no leader known")
	}
	c.kill(victim)
	for _, wid := range ids {
		sendAll(wid, "PreviouslyAccepted")
		r, err := postUntilAnswered(ctx, c, 0, "/Signup/"+wid+"/run", "again", nil)
		if err != nil || r.status != http.StatusConflict || r.header.Get("x-restate-id") != invocation.WorkflowRun("Signup", wid).String() {
			t.Fatalf("second call of %s: %v %v", wid, r, err)
		}
		for _, verb := range []string{"attach", "output"} {
			var got *response
			testutil.WaitFor(t, 20*time.Second, verb+" "+wid, func() bool {
				n := c.nodes[(victim.id)%len(c.nodes)]
				r, err := do(ctx, http.MethodGet, n.ingressURL()+"/restate/workflow/Signup/"+wid+"/"+verb, nil, nil)
				got = r
				return err == nil && r.status == http.StatusOK
			})
			if string(got.body) != "welcome "+wid {
				t.Fatalf("%s %s: %s", verb, wid, got.body)
			}
		}
		r, err = postUntilAnswered(ctx, c, 1, "/Signup/"+wid+"/status", "", nil)
		if err != nil || r.status != http.StatusOK || string(r.body) != "status of "+wid {
			t.Fatalf("shared handler of %s: %v %v", wid, r, err)
		}
	}
	c.restart(victim)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, wid := range ids {
		if len(svc.runs[wid]) != 1 {
			t.Errorf("workflow %s ran as %d invocations: %v", wid, len(svc.runs[wid]), svc.runs[wid])
		}
	}
}
