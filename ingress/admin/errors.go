package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/raftgate/raftgate/rpc"
)

// errorBody is the JSON form of every admin error.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Source  string `json:"source"`
}

// retryAfterSeconds is the hint sent with retryable 503s: leader elections
// settle within about a second.
const retryAfterSeconds = 1

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Messages such as "Bearer <token>" stay readable.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing left to tell it
}

func (s *server) writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status >= 500 {
		s.log.Warn().Str("method", r.Method).Str("path", r.URL.Path).Int("status", status).Str("error", msg).Msg("admin request failed")
	} else {
		s.log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Int("status", status).Str("error", msg).Msg("admin request refused")
	}
	writeJSON(w, status, errorBody{Code: status, Message: msg, Source: "admin"})
}

// writeCallError maps an error of a call into the cluster to its HTTP
// status, in this one place. what names the thing the call was about.
func (s *server) writeCallError(w http.ResponseWriter, r *http.Request, what string, err error) {
	status, msg := callErrorStatus(what, err)
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	}
	s.writeError(w, r, status, msg)
}

func callErrorStatus(what string, err error) (int, string) {
	var notLeader *rpc.NotLeaderError
	switch {
	case errors.Is(err, rpc.ErrNotFound):
		return http.StatusNotFound, fmt.Sprintf("%s not found (or its result was already purged)", what)
	case errors.Is(err, rpc.ErrInvalid):
		return http.StatusBadRequest, fmt.Sprintf("%s: %v", what, err)
	case errors.Is(err, rpc.ErrConflict):
		return http.StatusConflict, fmt.Sprintf("%s: %v", what, err)
	case errors.Is(err, rpc.ErrOverloaded):
		return http.StatusTooManyRequests, fmt.Sprintf("%s: cluster is overloaded, nothing was done; retry later", what)
	case errors.As(err, &notLeader), errors.Is(err, rpc.ErrUnavailable), errors.Is(err, rpc.ErrLostLeadership),
		errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, fmt.Sprintf("%s: no partition leader answered in time (%v); retrying is safe", what, err)
	case errors.Is(err, context.Canceled):
		// The client went away; the status is for the log only.
		return 499, fmt.Sprintf("%s: request cancelled", what)
	default:
		return http.StatusInternalServerError, fmt.Sprintf("%s: %v", what, err)
	}
}
