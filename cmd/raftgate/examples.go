package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// The example keyed services of `raftgate dev` and `raftgate echo`, held in
// memory (a real service keeps its state in its own store).
const (
	counterName = "Counter" // a virtual object
	signupName  = "Signup"  // a workflow
)

// exampleService is what registering an example service takes.
type exampleService struct {
	name, kind       string
	handlers, shared []string
}

// keyedExamples are Counter and Signup, as they are registered.
var keyedExamples = []exampleService{
	{name: counterName, kind: "object", handlers: []string{"add", "get"}, shared: []string{"get"}},
	{name: signupName, kind: "workflow", handlers: []string{"run", "status"}},
}

// keyedHeader carries an object key or workflow id to the service.
const keyedHeader = "x-raftgate-key"

// counter is the virtual object Counter: POST /Counter/add with a JSON
// number (1 when empty) adds it to the key's count and answers the new
// count; /Counter/get (shared) answers the count. An invocation delivered
// again (the same x-restate-id) is counted once.
type counter struct {
	mu      sync.Mutex
	counts  map[string]int64
	counted map[string]int64 // invocation id → the count it answered
}

func (c *counter) register(mux *http.ServeMux) {
	c.counts, c.counted = map[string]int64{}, map[string]int64{}
	mux.HandleFunc("POST /"+counterName+"/add", func(w http.ResponseWriter, r *http.Request) {
		var n int64 = 1
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<10))
		if err == nil && strings.TrimSpace(string(body)) != "" {
			err = json.Unmarshal(body, &n)
		}
		if err != nil {
			http.Error(w, "want a JSON integer to add: "+err.Error(), http.StatusBadRequest)
			return
		}
		key, id := r.Header.Get(keyedHeader), r.Header.Get("x-restate-id")
		c.mu.Lock()
		count, seen := c.counted[id]
		if !seen || id == "" {
			c.counts[key] += n
			count = c.counts[key]
			c.counted[id] = count
		}
		c.mu.Unlock()
		writeJSON(w, count)
	})
	mux.HandleFunc("POST /"+counterName+"/get", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		count := c.counts[r.Header.Get(keyedHeader)]
		c.mu.Unlock()
		writeJSON(w, count)
	})
}

// signup is the workflow Signup: run (once per id) takes {"email":…} and
// answers a welcome; status (shared) answers how far the id's run got.
type signup struct {
	mu     sync.Mutex
	emails map[string]string // workflow id → email of its run
}

func (s *signup) register(mux *http.ServeMux) {
	s.emails = map[string]string{}
	mux.HandleFunc("POST /"+signupName+"/run", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Email string `json:"email"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<10)).Decode(&in); err != nil || in.Email == "" {
			http.Error(w, `want {"email":"…"}`, http.StatusBadRequest)
			return
		}
		id := r.Header.Get(keyedHeader)
		s.mu.Lock()
		s.emails[id] = in.Email
		s.mu.Unlock()
		writeJSON(w, fmt.Sprintf("Welcome, %s! A confirmation went to %s.", id, in.Email))
	})
	mux.HandleFunc("POST /"+signupName+"/status", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		email, ok := s.emails[r.Header.Get(keyedHeader)]
		s.mu.Unlock()
		if !ok {
			writeJSON(w, "not signed up")
			return
		}
		writeJSON(w, "signed up with "+email)
	})
}

// newKeyedExamples serves Counter and Signup.
func newKeyedExamples(mux *http.ServeMux) {
	(&counter{}).register(mux)
	(&signup{}).register(mux)
}

func writeJSON(w http.ResponseWriter, v any) {
	out, _ := json.Marshal(v) // numbers and strings always marshal
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// exampleNames lists the services with their kinds: "Greeter (service), …".
func exampleNames(svcs []exampleService) string {
	names := make([]string, len(svcs))
	for i, s := range svcs {
		names[i] = s.name + " (" + s.kind + ")"
	}
	return strings.Join(names, ", ")
}
