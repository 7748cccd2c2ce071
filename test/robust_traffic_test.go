package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// opKind is what a traffic client did.
type opKind string

const (
	kindSend      opKind = "send"       // POST …/send with an idempotency key
	kindResend    opKind = "resend"     // the same key and body again (a client that lost the ack)
	kindSendPlain opKind = "send-plain" // POST …/send without a key: one attempt, never retried
	kindCall      opKind = "call"       // POST … with an idempotency key, waits for the result
	kindOutput    opKind = "output"     // GET …/output of an acknowledged invocation
	kindAttach    opKind = "attach"     // GET …/attach?timeout= of an acknowledged invocation
)

// attempt is one HTTP exchange of an operation.
type attempt struct {
	Node       int       `json:"node"`
	Start, End time.Time `json:"-"`
	Status     int       `json:"status,omitempty"`
	Err        string    `json:"err,omitempty"`
}

// op is one logical client operation: all attempts a careful client made
// for it. For a submit, acked means it was acknowledged (202 or a call's
// 200); a submit that was never acknowledged has an unknown outcome. For a
// read, status is the definitive answer (200, 404 or 470), 0 if none came.
type op struct {
	Client   int       `json:"client"`
	Kind     opKind    `json:"kind"`
	Key      string    `json:"key,omitempty"`
	ID       string    `json:"id,omitempty"`
	Payload  string    `json:"payload,omitempty"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Acked    bool      `json:"acked,omitempty"`
	Status   int       `json:"status,omitempty"`
	Body     string    `json:"body,omitempty"`
	Target   *op       `json:"-"` // for reads and resends: the submit read
	Attempts []attempt `json:"attempts"`
}

// isSubmit is true for operations that create (or re-find) an invocation.
func (o *op) isSubmit() bool {
	return o.Kind == kindSend || o.Kind == kindResend || o.Kind == kindSendPlain || o.Kind == kindCall
}

// recording is the history of one traffic run.
type recording struct {
	mu        sync.Mutex
	ops       []*op
	acked     []*op                      // acknowledged first submits, readable targets
	statuses  map[int]int                // HTTP status -> count, every attempt
	netErrs   int                        // attempts without an HTTP answer
	idsByKey  map[string]map[string]bool // idempotency key -> invocation ids answered
	anomalies []string                   // answers a careful client must never get
}

func newRecording() *recording {
	return &recording{statuses: map[int]int{}, idsByKey: map[string]map[string]bool{}}
}

func (h *recording) anomaly(format string, args ...any) {
	h.mu.Lock()
	h.anomalies = append(h.anomalies, fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

// traffic drives concurrent clients against every node's ingress.
type traffic struct {
	c       *cluster
	service string
	rec     *recording
	seed    uint64
	// attemptTimeout bounds one HTTP exchange; a frozen node must not
	// hold a client for long.
	attemptTimeout time.Duration
}

// run starts clients until ctx ends; the returned function waits for them.
func (tr *traffic) run(ctx context.Context, clients int) (wait func()) {
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(client int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(tr.seed, uint64(client)))
			for seq := 0; ctx.Err() == nil; seq++ {
				tr.one(ctx, rng, client, seq)
			}
		}(i)
	}
	return wg.Wait
}

func (tr *traffic) one(ctx context.Context, rng *rand.Rand, client, seq int) {
	payload := fmt.Sprintf(`"c%d-s%d-%d"`, client, seq, tr.seed)
	key := fmt.Sprintf("k%d-c%d-s%d", tr.seed, client, seq)
	switch r := rng.IntN(100); {
	case r < 30:
		tr.submit(ctx, rng, &op{Client: client, Kind: kindSend, Key: key, Payload: payload}, nil)
	case r < 35:
		if t := tr.pick(rng, kindSend); t != nil {
			tr.submit(ctx, rng, &op{Client: client, Kind: kindResend, Key: t.Key, Payload: t.Payload, Target: t}, nil)
		}
	case r < 45:
		tr.submit(ctx, rng, &op{Client: client, Kind: kindSendPlain, Payload: payload}, nil)
	case r < 65:
		tr.submit(ctx, rng, &op{Client: client, Kind: kindCall, Key: key, Payload: payload}, nil)
	case r < 85:
		if t := tr.pick(rng, ""); t != nil {
			tr.read(ctx, rng, &op{Client: client, Kind: kindOutput, Key: t.Key, ID: t.ID, Target: t}, nil)
		}
	default:
		if t := tr.pick(rng, ""); t != nil {
			tr.read(ctx, rng, &op{Client: client, Kind: kindAttach, Key: t.Key, ID: t.ID, Target: t}, nil)
		}
	}
}

// pick returns a random acknowledged submit (of kind, if not empty).
func (tr *traffic) pick(rng *rand.Rand, kind opKind) *op {
	tr.rec.mu.Lock()
	defer tr.rec.mu.Unlock()
	for range 4 {
		if len(tr.rec.acked) == 0 {
			return nil
		}
		if t := tr.rec.acked[rng.IntN(len(tr.rec.acked))]; kind == "" || t.Kind == kind {
			return t
		}
	}
	return nil
}

// exchange makes one HTTP attempt through node n and records it.
func (tr *traffic) exchange(ctx context.Context, o *op, n *node, method, path string, body []byte, header map[string]string) (*response, error) {
	a := attempt{Node: n.id, Start: time.Now()}
	actx, cancel := context.WithTimeout(ctx, tr.attemptTimeout)
	r, err := do(actx, method, n.ingressURL()+path, body, header)
	cancel()
	a.End = time.Now()
	tr.rec.mu.Lock()
	defer tr.rec.mu.Unlock()
	if err != nil {
		a.Err = err.Error()
		tr.rec.netErrs++
	} else {
		a.Status = r.status
		tr.rec.statuses[r.status]++
		if r.status >= 500 && strings.Contains(strings.ToLower(string(r.body)), "lost") {
			tr.rec.anomalies = append(tr.rec.anomalies, fmt.Sprintf("%s %s via node %d: %d says lost: %s", o.Kind, path, n.id, r.status, r.body))
		}
		if id := r.header.Get("x-restate-id"); id != "" && o.Key != "" && (o.isSubmit() || r.status == http.StatusOK) {
			if tr.rec.idsByKey[o.Key] == nil {
				tr.rec.idsByKey[o.Key] = map[string]bool{}
			}
			tr.rec.idsByKey[o.Key][id] = true
		}
	}
	o.Attempts = append(o.Attempts, a)
	return r, err
}

// retryPause is how long a careful client waits before retrying: the
// server's Retry-After (capped, to keep runs short) or a short backoff.
func retryPause(ctx context.Context, r *response, attemptNo int) {
	d := time.Duration(20*(attemptNo+1)) * time.Millisecond
	if r != nil {
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err == nil && s > 0 {
			d = time.Duration(s) * time.Second
		}
	}
	d = min(d, 500*time.Millisecond)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// submit runs a send or call to acknowledgement, retrying retry-safe
// answers with the same idempotency key on the next node. A plain send is
// tried once: without a key a retry could create a second invocation.
// via, when not nil, is the only node asked, once: its answer is recorded
// and nothing is retried.
func (tr *traffic) submit(ctx context.Context, rng *rand.Rand, o *op, via *node) {
	o.Start = time.Now()
	defer func() {
		o.End = time.Now()
		tr.rec.mu.Lock()
		tr.rec.ops = append(tr.rec.ops, o)
		if o.Acked && (o.Kind == kindSend || o.Kind == kindSendPlain || o.Kind == kindCall) {
			tr.rec.acked = append(tr.rec.acked, o)
		}
		tr.rec.mu.Unlock()
	}()
	path := "/" + tr.service + "/echo"
	switch o.Kind {
	case kindCall:
		path += "?timeout=3s"
	default:
		path += "/send"
	}
	header := map[string]string{}
	if o.Key != "" {
		header["idempotency-key"] = o.Key
	}
	start := rng.IntN(len(tr.c.nodes))
	for i := 0; ctx.Err() == nil; i++ {
		n := tr.c.nodes[(start+i)%len(tr.c.nodes)]
		if via != nil {
			n = via
		}
		r, err := tr.exchange(ctx, o, n, http.MethodPost, path, []byte(o.Payload), header)
		switch {
		case err != nil:
			// Connection error or our own timeout: retry-safe with a key.
		case r.status == http.StatusAccepted && o.Kind != kindCall:
			var sr sendResult
			if err := json.Unmarshal(r.body, &sr); err != nil || sr.InvocationID == "" {
				tr.rec.anomaly("%s %s: bad 202 body %q", o.Kind, o.Key, r.body)
				return
			}
			if h := r.header.Get("x-restate-id"); h != sr.InvocationID {
				tr.rec.anomaly("%s %s: x-restate-id %q != body id %q", o.Kind, o.Key, h, sr.InvocationID)
			}
			if o.Kind == kindResend && sr.Status != "PreviouslyAccepted" {
				tr.rec.anomaly("resend of acknowledged key %s answered %q, want PreviouslyAccepted", o.Key, sr.Status)
			}
			o.ID, o.Acked, o.Status = sr.InvocationID, true, r.status
			return
		case r.status == http.StatusOK && o.Kind == kindCall:
			o.ID, o.Acked, o.Status, o.Body = r.header.Get("x-restate-id"), true, r.status, string(r.body)
			return
		case r.status == http.StatusServiceUnavailable || r.status == http.StatusTooManyRequests:
			if r.header.Get("Retry-After") == "" {
				tr.rec.anomaly("%s %s: %d without Retry-After: %s", o.Kind, o.Key, r.status, r.body)
			}
		case r.status == statusNotReady && o.Kind == kindCall:
			// The call's own timeout passed; the invocation goes on.
		default:
			tr.rec.anomaly("%s %s via node %d: unexpected %d: %s", o.Kind, o.Key, n.id, r.status, r.body)
			return
		}
		if o.Kind == kindSendPlain || via != nil {
			return // outcome unknown; a keyless client cannot retry safely
		}
		retryPause(ctx, r, i)
	}
}

// statusNotReady is the ingress's "no result yet" (attach timeout, output).
const statusNotReady = 470

// read runs an output or attach until a definitive answer (200, 404, 470)
// or until ctx ends; 503s and connection errors are retried elsewhere.
// via, when not nil, is the only node asked.
func (tr *traffic) read(ctx context.Context, rng *rand.Rand, o *op, via *node) {
	o.Start = time.Now()
	path := "/restate/invocation/"
	if o.Key != "" {
		path += tr.service + "/echo/" + o.Key
	} else {
		path += o.ID
	}
	if o.Kind == kindOutput {
		path += "/output"
	} else {
		path += "/attach?timeout=2s"
	}
	start := rng.IntN(len(tr.c.nodes))
	for i := 0; ctx.Err() == nil && i < 6; i++ {
		n := tr.c.nodes[(start+i)%len(tr.c.nodes)]
		if via != nil {
			n = via
		}
		r, err := tr.exchange(ctx, o, n, http.MethodGet, path, nil, nil)
		if err == nil {
			switch r.status {
			case http.StatusOK, http.StatusNotFound, statusNotReady:
				o.Status, o.Body = r.status, string(r.body)
				if r.status != http.StatusOK {
					o.Body = ""
				}
			case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			default:
				tr.rec.anomaly("%s %s via node %d: unexpected %d: %s", o.Kind, path, n.id, r.status, r.body)
			}
		}
		if o.Status != 0 {
			break
		}
		retryPause(ctx, r, i)
	}
	o.End = time.Now()
	tr.rec.mu.Lock()
	tr.rec.ops = append(tr.rec.ops, o)
	tr.rec.mu.Unlock()
}

// readBurst reads the output of the most recently acknowledged invocations
// through node n only, all at once: right after a frozen or isolated
// leader comes back, it may still believe it leads and must not answer
// from stale state.
func (tr *traffic) readBurst(n *node, count int) {
	tr.rec.mu.Lock()
	targets := tr.rec.acked[max(0, len(tr.rec.acked)-count):]
	targets = append([]*op(nil), targets...)
	tr.rec.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(tr.seed, uint64(1000+i)))
			tr.read(ctx, rng, &op{Client: 1000 + i, Kind: kindOutput, Key: t.Key, ID: t.ID, Target: t}, n)
		}()
	}
	wg.Wait()
}

// submitBurst sends count fresh idempotent sends through node n only, one
// attempt each with the given timeout, in the background: what a node cut
// off from the majority (or frozen) answers its own clients. The returned
// function waits for them.
func (tr *traffic) submitBurst(n *node, count int, timeout time.Duration) (wait func()) {
	burst := *tr
	burst.attemptTimeout = timeout
	var wg sync.WaitGroup
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d-via%d-%d", tr.seed, n.id, i)
			o := &op{Client: 2000 + i, Kind: kindSend, Key: key, Payload: fmt.Sprintf("%q", key)}
			burst.submit(context.Background(), rand.New(rand.NewPCG(tr.seed, uint64(i))), o, n)
		}()
	}
	return wg.Wait
}
