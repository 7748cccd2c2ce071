package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/rpc"
)

// ruleRegistry is testRegistry with an in-memory rule book that checks
// versions as the registry does.
type ruleRegistry struct {
	testRegistry
	rmu   sync.Mutex
	rules map[string]*rpc.Rule
}

func (r *ruleRegistry) PutRule(_ context.Context, rule *rpc.Rule, expected uint64) (*rpc.Rule, error) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if v := r.rules[rule.Pattern].GetVersion(); v != expected {
		return nil, fmt.Errorf("rule at version %d: %w", v, rpc.ErrConflict)
	}
	next := &rpc.Rule{Pattern: rule.Pattern, Concurrency: rule.Concurrency, Enabled: rule.Enabled, Version: expected + 1}
	r.rules[rule.Pattern] = next
	return next, nil
}

func (r *ruleRegistry) DeleteRule(_ context.Context, pattern string, expected uint64) error {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	cur, ok := r.rules[pattern]
	switch {
	case !ok:
		return rpc.ErrNotFound
	case expected != 0 && expected != cur.Version:
		return fmt.Errorf("rule at version %d: %w", cur.Version, rpc.ErrConflict)
	}
	delete(r.rules, pattern)
	return nil
}

func (r *ruleRegistry) Rules() []*rpc.Rule {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	var out []*rpc.Rule
	for _, rule := range r.rules {
		out = append(out, rule)
	}
	slices.SortFunc(out, func(a, b *rpc.Rule) int { return strings.Compare(a.Pattern, b.Pattern) })
	return out
}

func TestRulesCommands(t *testing.T) {
	reg := &ruleRegistry{testRegistry: testRegistry{svcs: map[string]*rpc.Service{}}, rules: map[string]*rpc.Rule{}}
	h, err := admin.New(admin.Config{Cluster: testCluster{ready: true}, Invocations: noInvocations{}, Registry: reg,
		Partitions: 2, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	url := srv.URL

	if res := runCLI(t, "", "rules", "list", "--admin", url); res.code != 0 || !strings.Contains(res.stdout, "no rules") {
		t.Fatalf("empty list: %+v", res)
	}
	if res := runCLI(t, "", "rules", "set", "checkout", "--concurrency", "50", "--admin", url); res.code != 0 ||
		!strings.Contains(res.stdout, "rule checkout: concurrency 50, enabled, version 1") {
		t.Fatalf("set: %+v", res)
	}
	// set reads the version first, so a second set replaces the first.
	if res := runCLI(t, "", "rules", "set", "checkout", "--concurrency", "20", "--admin", url); res.code != 0 ||
		!strings.Contains(res.stdout, "concurrency 20, enabled, version 2") {
		t.Fatalf("second set: %+v", res)
	}
	// A change at a stale version is refused, and says so.
	if res := runCLI(t, "", "rules", "set", "checkout", "--concurrency", "9", "--expected-version", "1", "--admin", url); res.code == 0 ||
		!strings.Contains(res.stderr, "409") || reg.rules["checkout"].Concurrency != 20 {
		t.Fatalf("stale set: %+v", res)
	}
	if res := runCLI(t, "", "rules", "disable", "checkout", "--admin", url); res.code != 0 ||
		!strings.Contains(res.stdout, "concurrency 20, disabled, version 3") {
		t.Fatalf("disable: %+v", res)
	}
	if res := runCLI(t, "", "rules", "enable", "nosuch", "--admin", url); res.code == 0 || !strings.Contains(res.stderr, `no rule for "nosuch"`) {
		t.Fatalf("enable of a missing rule: %+v", res)
	}
	runCLI(t, "", "rules", "set", "*", "--concurrency", "200", "--admin", url)
	res := runCLI(t, "", "rules", "list", "--admin", url)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "*         200          enabled   1") ||
		!strings.HasPrefix(lines[2], "checkout  20           disabled  3") {
		t.Fatalf("list: %q", res.stdout)
	}
	res = runCLI(t, "", "rules", "list", "--json", "--admin", url)
	var l admin.RuleList
	if err := json.Unmarshal([]byte(res.stdout), &l); err != nil || len(l.Rules) != 2 || l.Rules[0].Pattern != "*" {
		t.Fatalf("list --json: %v %q", err, res.stdout)
	}
	if res := runCLI(t, "", "rules", "set", "a/b", "--concurrency", "1", "--admin", url); res.code == 0 || !strings.Contains(res.stderr, "400") {
		t.Fatalf("bad pattern: %+v", res)
	}
	if res := runCLI(t, "", "rules", "delete", "checkout", "--expected-version", "2", "--admin", url); res.code == 0 || !strings.Contains(res.stderr, "409") {
		t.Fatalf("stale delete: %+v", res)
	}
	if res := runCLI(t, "", "rules", "delete", "checkout", "--admin", url); res.code != 0 || !strings.Contains(res.stdout, "rule checkout deleted") {
		t.Fatalf("delete: %+v", res)
	}
	if res := runCLI(t, "", "rules", "delete", "checkout", "--admin", url); res.code == 0 || !strings.Contains(res.stderr, "404") {
		t.Fatalf("delete again: %+v", res)
	}
}

func TestServicesShowLimits(t *testing.T) {
	reg := &testRegistry{svcs: map[string]*rpc.Service{}}
	url := startAdmin(t, "", reg)
	res := runCLI(t, "", "services", "add", "Shop", "http://127.0.0.1:9080", "--kind", "object", "--shared", "get",
		"--concurrency", "3", "--rate", "50", "--burst", "10", "--per-key-concurrency", "2", "--admin", url)
	if res.code != 0 {
		t.Fatalf("add: %+v", res)
	}
	if l := reg.svcs["Shop"].GetLimits(); l.GetConcurrency() != 3 || l.GetRatePerSecond() != 50 || l.GetBurst() != 10 {
		t.Fatalf("stored %v", reg.svcs["Shop"])
	}
	res = runCLI(t, "", "services", "show", "Shop", "--admin", url)
	for _, want := range []string{"limits               3 in flight, 50/s (burst 10)", "per-key concurrency  2"} {
		if res.code != 0 || !strings.Contains(res.stdout, want) {
			t.Fatalf("show lacks %q: %+v", want, res)
		}
	}
	if strings.Contains(res.stdout, "not yet") {
		t.Fatalf("show says limits are not enforced: %s", res.stdout) // they are (partition/flow.go)
	}
	if res := runCLI(t, "", "services", "add", "Bad", "http://127.0.0.1:9080", "--burst", "3", "--admin", url); res.code == 0 ||
		!strings.Contains(res.stderr, "needs a ratePerSecond") {
		t.Fatalf("burst without rate: %+v", res)
	}
	if res := runCLI(t, "", "services", "show", "Nope", "--admin", url); res.code == 0 || !strings.Contains(res.stderr, "404") {
		t.Fatalf("show unknown: %+v", res)
	}
}
