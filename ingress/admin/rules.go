package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// Rules is a Registry that also holds the scope rules (GET/PUT/DELETE
// /rules). Changes go to the metadata group's leader; Rules reads this
// replica (after Registry.CatchUp).
type Rules interface {
	// PutRule stores rule if its version is expected (0: new) and returns
	// it as stored; rpc.ErrConflict when another change came first.
	PutRule(ctx context.Context, rule *rpc.Rule, expected uint64) (*rpc.Rule, error)
	// DeleteRule removes the rule of pattern if its version is expected
	// (0: any); rpc.ErrNotFound or rpc.ErrConflict otherwise.
	DeleteRule(ctx context.Context, pattern string, expected uint64) error
	Rules() []*rpc.Rule
}

// RuleView is the JSON form of a scope rule.
type RuleView struct {
	Pattern     string `json:"pattern"`
	Concurrency uint32 `json:"concurrency"`
	Enabled     bool   `json:"enabled"`
	Version     uint64 `json:"version"`
	UpdatedAt   string `json:"updatedAt,omitempty"`
}

// RuleList is the JSON form of GET /rules.
type RuleList struct {
	Rules []RuleView `json:"rules"`
}

// RuleRequest is the body of PUT /rules/{pattern}. ExpectedVersion is the
// version the change replaces: 0 (or absent) creates the rule.
type RuleRequest struct {
	Concurrency     uint32 `json:"concurrency"`
	Enabled         *bool  `json:"enabled,omitempty"`
	ExpectedVersion uint64 `json:"expectedVersion"`
}

func ruleView(r *rpc.Rule) RuleView {
	v := RuleView{Pattern: r.GetPattern(), Concurrency: r.GetConcurrency(), Enabled: r.GetEnabled(), Version: r.GetVersion()}
	if ms := r.GetUpdatedAtUnixMs(); ms != 0 {
		v.UpdatedAt = formatTime(ms)
	}
	return v
}

// rules returns the registry's rule book, or answers 404 itself.
func (s *server) rules(w http.ResponseWriter, r *http.Request) (Rules, bool) {
	rs, ok := s.cfg.Registry.(Rules)
	if !ok {
		s.writeError(w, r, http.StatusNotFound, "this node does not serve scope rules")
	}
	return rs, ok
}

func (s *server) listRules(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.rules(w, r)
	if !ok || !s.catchUp(w, r) {
		return
	}
	out := RuleList{Rules: []RuleView{}}
	for _, rule := range rs.Rules() {
		out.Rules = append(out.Rules, ruleView(rule))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) getRule(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.rules(w, r)
	if !ok || !s.catchUp(w, r) {
		return
	}
	pattern := r.PathValue("pattern")
	for _, rule := range rs.Rules() {
		if rule.Pattern == pattern {
			writeJSON(w, http.StatusOK, ruleView(rule))
			return
		}
	}
	s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("no rule for %q (raftgate rules list shows the rules)", pattern))
}

func (s *server) putRule(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.rules(w, r)
	if !ok {
		return
	}
	pattern := r.PathValue("pattern")
	var req RuleRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxServiceBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("empty body")
		}
		s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf(`body must be JSON like {"concurrency": 50, "enabled": true, "expectedVersion": 0}: %v`, err))
		return
	}
	rule := &rpc.Rule{Pattern: pattern, Concurrency: req.Concurrency, Enabled: req.Enabled == nil || *req.Enabled,
		UpdatedAtUnixMs: s.cfg.Now().UnixMilli()}
	if err := checkRule(rule); err != nil {
		s.writeError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	stored, err := rs.PutRule(ctx, rule, req.ExpectedVersion)
	if err != nil {
		s.writeRuleError(w, r, pattern, err)
		return
	}
	status := http.StatusOK
	if stored.GetVersion() == 1 {
		status = http.StatusCreated
	}
	writeJSON(w, status, ruleView(stored))
}

func (s *server) deleteRule(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.rules(w, r)
	if !ok {
		return
	}
	pattern := r.PathValue("pattern")
	var expected uint64
	if v := r.URL.Query().Get("expectedVersion"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			s.writeError(w, r, http.StatusBadRequest, fmt.Sprintf("expectedVersion %q must be the rule's version, a positive integer", v))
			return
		}
		expected = n
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	if err := rs.DeleteRule(ctx, pattern, expected); err != nil {
		s.writeRuleError(w, r, pattern, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkRule gives the admin API's message for a malformed rule (the
// registry checks again when it applies it).
func checkRule(rule *rpc.Rule) error {
	if rule.Pattern != registry.AnyScope {
		if err := registry.ValidateScope(rule.Pattern); err != nil {
			return fmt.Errorf(`rule pattern: %v; or "*" for every scope`, err)
		}
	}
	if rule.Concurrency == 0 {
		return errors.New(`"concurrency" must be at least 1 (disable the rule with "enabled": false, or delete it)`)
	}
	return nil
}

func (s *server) writeRuleError(w http.ResponseWriter, r *http.Request, pattern string, err error) {
	switch {
	case errors.Is(err, rpc.ErrConflict):
		s.writeError(w, r, http.StatusConflict, fmt.Sprintf("%v; nothing changed: read the rule again (GET /rules/%s) and send its version as expectedVersion", err, pattern))
	case errors.Is(err, rpc.ErrNotFound):
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("no rule for %q", pattern))
	default:
		s.writeCallError(w, r, fmt.Sprintf("rule %q", pattern), err)
	}
}
