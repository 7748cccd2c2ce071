package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// rulesBucket: pattern → marshalled rpc.Rule.
var rulesBucket = []byte("rules")

// AnyScope is the rule pattern that matches every scope.
const AnyScope = "*"

// maxScopeLen bounds a scope name (and so a rule pattern).
const maxScopeLen = 128

// ValidateScope checks a scope name: letters, digits, '_', '.', '-' (1 to
// 128), as a service name; it is a path segment.
func ValidateScope(scope string) error {
	if scope == "" || len(scope) > maxScopeLen || strings.Trim(scope, ".") == "" ||
		strings.IndexFunc(scope, func(c rune) bool {
			return !(c == '_' || c == '.' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z')
		}) >= 0 {
		return fmt.Errorf("scope %q is invalid: want letters, digits, '_', '.' or '-' (1 to %d), not only dots", scope, maxScopeLen)
	}
	return nil
}

// validateRule checks a rule's pattern (a scope, or "*") and limit.
func validateRule(rule *rpc.Rule) error {
	if rule == nil {
		return fmt.Errorf("registry: rule required: %w", rpc.ErrInvalid)
	}
	if rule.Pattern != AnyScope {
		if err := ValidateScope(rule.Pattern); err != nil {
			return fmt.Errorf("registry: rule pattern: %v (or \"*\" for every scope): %w", err, rpc.ErrInvalid)
		}
	}
	if rule.Concurrency == 0 {
		return fmt.Errorf("registry: rule %q: concurrency must be at least 1: %w", rule.Pattern, rpc.ErrInvalid)
	}
	return nil
}

// PutRule creates or replaces a scope rule if its current version is
// expected (0: the rule must not exist yet), and returns the rule as
// stored, with its new version. rpc.ErrConflict when another change
// came first. Leader only, as Put.
func (r *Registry) PutRule(ctx context.Context, rule *rpc.Rule, expected uint64) (*rpc.Rule, error) {
	if err := validateRule(rule); err != nil {
		return nil, err
	}
	rule = proto.Clone(rule).(*rpc.Rule)
	if rule.UpdatedAtUnixMs == 0 {
		rule.UpdatedAtUnixMs = r.now().UnixMilli()
	}
	requestID := invocation.NewRequestID()
	if _, err := r.propose(ctx, requestID, &rpc.Command{Cmd: &rpc.Command_PutRule{PutRule: &rpc.PutRule{Rule: rule, ExpectedVersion: expected, RequestId: requestID}}}); err != nil {
		return nil, err
	}
	stored, ok := r.Rule(rule.Pattern)
	if !ok { // deleted by a later entry already
		return nil, fmt.Errorf("registry: rule %q: %w", rule.Pattern, rpc.ErrNotFound)
	}
	return stored, nil
}

// DeleteRule removes a scope rule if its version is expected (0: any);
// rpc.ErrNotFound if there is none, rpc.ErrConflict if it changed.
func (r *Registry) DeleteRule(ctx context.Context, pattern string, expected uint64) error {
	requestID := invocation.NewRequestID()
	_, err := r.propose(ctx, requestID, &rpc.Command{Cmd: &rpc.Command_DeleteRule{DeleteRule: &rpc.DeleteRule{Pattern: pattern, ExpectedVersion: expected, RequestId: requestID}}})
	return err
}

// Rule returns the applied rule of pattern.
func (r *Registry) Rule(pattern string) (*rpc.Rule, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rule, ok := r.rules[pattern]
	return rule, ok
}

// Rules returns every rule, sorted by pattern ("*" first).
func (r *Registry) Rules() []*rpc.Rule {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*rpc.Rule, 0, len(r.rules))
	for _, rule := range r.rules {
		out = append(out, rule)
	}
	slices.SortFunc(out, func(a, b *rpc.Rule) int { return strings.Compare(a.Pattern, b.Pattern) })
	return out
}

// HasRules reports whether any rule exists.
func (r *Registry) HasRules() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.rules) > 0
}

// RuleFor returns the enabled rule that applies to scope: the scope's own
// rule, else "*"'s; none for an invocation without a scope.
func (r *Registry) RuleFor(scope string) (*rpc.Rule, bool) {
	if scope == "" {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if rule, ok := r.rules[scope]; ok && rule.Enabled {
		return rule, true
	}
	if rule, ok := r.rules[AnyScope]; ok && rule.Enabled {
		return rule, true
	}
	return nil, false
}

// applyRule applies a PutRule or DeleteRule to the rules bucket. It
// returns the rule's new state (nil: deleted), whether anything changed,
// and the refusal to answer with; err is a storage failure.
func applyRule(b *bolt.Bucket, c *rpc.Command, index uint64) (pattern string, rule *rpc.Rule, changed bool, refused, err error) {
	current := func(p string) (*rpc.Rule, error) {
		v := b.Get([]byte(p))
		if v == nil {
			return nil, nil
		}
		var cur rpc.Rule
		if err := proto.Unmarshal(v, &cur); err != nil {
			return nil, fmt.Errorf("registry: rule %q: %w", p, err)
		}
		return &cur, nil
	}
	switch cmd := c.Cmd.(type) {
	case *rpc.Command_PutRule:
		next := cmd.PutRule.GetRule()
		if validateRule(next) != nil {
			return "", nil, false, fmt.Errorf("registry: malformed rule: %w", rpc.ErrInvalid), nil
		}
		cur, err := current(next.Pattern)
		if err != nil {
			return "", nil, false, nil, err
		}
		if v := cur.GetVersion(); v != cmd.PutRule.ExpectedVersion {
			return "", nil, false, versionMismatch(next.Pattern, cmd.PutRule.ExpectedVersion, v), nil
		}
		next = proto.Clone(next).(*rpc.Rule)
		next.Version = cur.GetVersion() + 1
		data, err := storeMarshal.Marshal(next)
		if err != nil {
			return "", nil, false, nil, fmt.Errorf("registry: marshal rule: %w", err)
		}
		if err := b.Put([]byte(next.Pattern), data); err != nil {
			return "", nil, false, nil, fmt.Errorf("registry: put rule: %w", err)
		}
		return next.Pattern, next, true, nil, nil
	case *rpc.Command_DeleteRule:
		p := cmd.DeleteRule.Pattern
		cur, err := current(p)
		if err != nil {
			return "", nil, false, nil, err
		}
		if cur == nil {
			return "", nil, false, fmt.Errorf("registry: rule %q: %w", p, rpc.ErrNotFound), nil
		}
		if e := cmd.DeleteRule.ExpectedVersion; e != 0 && e != cur.Version {
			return "", nil, false, versionMismatch(p, e, cur.Version), nil
		}
		if err := b.Delete([]byte(p)); err != nil {
			return "", nil, false, nil, fmt.Errorf("registry: delete rule: %w", err)
		}
		return p, nil, true, nil, nil
	}
	return "", nil, false, nil, fmt.Errorf("registry: entry %d: unexpected command %T", index, c.Cmd)
}

func versionMismatch(pattern string, expected, current uint64) error {
	if current == 0 {
		return fmt.Errorf("rule %q does not exist (expected version %d): %w", pattern, expected, rpc.ErrConflict)
	}
	return fmt.Errorf("rule %q is at version %d, not the expected %d: %w", pattern, current, expected, rpc.ErrConflict)
}

// restoreRules reads the rules bucket.
func restoreRules(b *bolt.Bucket) (map[string]*rpc.Rule, error) {
	out := make(map[string]*rpc.Rule)
	rb := b.Bucket(rulesBucket)
	if rb == nil {
		return out, nil
	}
	err := rb.ForEach(func(k, v []byte) error {
		rule := &rpc.Rule{}
		if err := proto.Unmarshal(v, rule); err != nil {
			return fmt.Errorf("registry: rule %q: %w", k, err)
		}
		out[rule.Pattern] = rule
		return nil
	})
	return out, err
}
