package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/rs/zerolog"
)

// greeterName is the example service `raftgate dev` registers.
const greeterName = "Greeter"

// newGreeter is the example service of `raftgate dev`: POST /Greeter/greet
// with a name (a JSON string like "Ada", {"name":"Ada"}, or plain text)
// answers the JSON string "Hello, Ada!".
func newGreeter(log zerolog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /"+greeterName+"/greet", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
			return
		}
		name := greetName(body)
		log.Info().Str("invocation", r.Header.Get("x-restate-id")).Str("attempt", r.Header.Get("x-raftgate-attempt")).
			Str("name", name).Msg("greeter called")
		out, _ := json.Marshal("Hello, " + name + "!") // a string always marshals
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
	})
	return mux
}

func greetName(body []byte) string {
	var s string
	if json.Unmarshal(body, &s) == nil {
		return defaultName(s)
	}
	var obj struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(body, &obj) == nil {
		return defaultName(obj.Name)
	}
	return defaultName(string(body))
}

func defaultName(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return "World"
	}
	return s
}
