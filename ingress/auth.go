package ingress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// minTokenLen is the shortest plain-text token a token file may hold: a
// bearer token is a password that a script sends on every request.
const minTokenLen = 16

// Grant is what one ingress API token may do.
type Grant struct {
	// Name identifies the token in logs and errors; the token itself is
	// never logged.
	Name string
	// Services the token may call (and read results of); "*" is all.
	Services []string
	// Attach, Output and Cancel allow GET /restate/invocation/…/attach,
	// …/output and PATCH /restate/invocation/{id}/cancel. A call's own
	// result needs neither: the call waits for it.
	Attach, Output, Cancel bool
}

// allServices reports whether the grant covers every service.
func (g *Grant) allServices() bool { return slices.Contains(g.Services, "*") }

// mayCall reports whether the grant covers service.
func (g *Grant) mayCall(service string) bool {
	return g.allServices() || slices.Contains(g.Services, service)
}

// Tokens is a set of ingress API tokens, as loaded from a token file. It
// is immutable; a reload builds a new set (Handler.SetTokens).
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	grant  Grant
}

// Names lists the tokens' names, in file order (for logs).
func (t *Tokens) Names() []string {
	names := make([]string, len(t.entries))
	for i, e := range t.entries {
		names[i] = e.grant.Name
	}
	return names
}

// find returns the grant of the presented token, or nil. Every entry is
// compared, in constant time, so the answer's timing says nothing about
// which entry, or how much of one, matched.
func (t *Tokens) find(presented string) *Grant {
	digest := sha256.Sum256([]byte(presented))
	var found *Grant
	for i := range t.entries {
		if subtle.ConstantTimeCompare(digest[:], t.entries[i].digest[:]) == 1 {
			found = &t.entries[i].grant
		}
	}
	return found
}

// tokenFile is the TOML layout of a token file.
type tokenFile struct {
	Token []struct {
		Name     string   `toml:"name"`
		Token    string   `toml:"token"`
		SHA256   string   `toml:"sha256"`
		Services []string `toml:"services"`
		Attach   bool     `toml:"attach"`
		Output   bool     `toml:"output"`
		Cancel   bool     `toml:"cancel"`
	} `toml:"token"`
}

// LoadTokens reads a token file (TOML, see docs/operations.md "Ingress
// authentication"):
//
//	[[token]]
//	name = "checkout"
//	sha256 = "<hex SHA-256 of the token>"   # or: token = "<the token>"
//	services = ["Cart", "Checkout"]          # or ["*"]
//	attach = true
//	output = true
//	cancel = false
//
// Errors name the file and the entry, never a token.
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens parses the contents of a token file (see LoadTokens).
func ParseTokens(data []byte) (*Tokens, error) {
	var f tokenFile
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&f)
	if err != nil {
		// A TOML parse error quotes the offending line, which may be a
		// token: say where, not what.
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return nil, fmt.Errorf("not valid TOML at line %d", perr.Position.Line)
		}
		return nil, errors.New("not valid TOML (want [[token]] tables)")
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		return nil, fmt.Errorf("unknown key %q (keys are name, token, sha256, services, attach, output, cancel)", undecoded[0].String())
	}
	t := &Tokens{entries: make([]tokenEntry, 0, len(f.Token))}
	names := map[string]bool{}
	for i, e := range f.Token {
		where := fmt.Sprintf("token %d", i+1)
		if e.Name != "" {
			where = fmt.Sprintf("token %d (%s)", i+1, e.Name)
		}
		var entry tokenEntry
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("%s: name is required (it stands for the token in logs)", where)
		case names[e.Name]:
			return nil, fmt.Errorf("%s: the name is used twice", where)
		case (e.Token == "") == (e.SHA256 == ""):
			return nil, fmt.Errorf("%s: give exactly one of token and sha256", where)
		case e.Token != "":
			if len(e.Token) < minTokenLen {
				return nil, fmt.Errorf("%s: the token is shorter than %d characters", where, minTokenLen)
			}
			entry.digest = sha256.Sum256([]byte(e.Token))
		default:
			b, err := hex.DecodeString(e.SHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("%s: sha256 must be 64 hex digits (sha256sum of the token)", where)
			}
			copy(entry.digest[:], b)
		}
		if len(e.Services) == 0 {
			return nil, fmt.Errorf(`%s: services is required: a list of service names, or ["*"] for all`, where)
		}
		for _, s := range e.Services {
			if s == "" || (s == "*" && len(e.Services) > 1) {
				return nil, fmt.Errorf(`%s: services holds names, or just "*"`, where)
			}
		}
		for _, other := range t.entries {
			if other.digest == entry.digest {
				return nil, fmt.Errorf("%s: the same token as %s", where, other.grant.Name)
			}
		}
		names[e.Name] = true
		entry.grant = Grant{Name: e.Name, Services: slices.Clone(e.Services), Attach: e.Attach, Output: e.Output, Cancel: e.Cancel}
		t.entries = append(t.entries, entry)
	}
	return t, nil
}

// InvocationControl is an optional interface of a Dispatcher
// (ingress/dispatch.Client has it). With it the ingress serves cancel, and
// learns which service an invocation addressed by id belongs to, for tokens
// limited to some services. Both methods may be called from many goroutines
// at once and retry as Dispatcher's methods do.
type InvocationControl interface {
	// Status returns the invocation's record (rpc.ErrNotFound if none).
	Status(ctx context.Context, partition uint32, id []byte) (*rpc.InvocationRecord, error)
	// Cancel completes the invocation with a cancelled result unless it
	// completed already.
	Cancel(ctx context.Context, partition uint32, id []byte) error
}

// errUnauthenticated is a 401 with WWW-Authenticate; errForbidden a 403
// that says which permission is missing. Neither echoes the token.
func errUnauthenticated(msg string) *apiError {
	return &apiError{code: http.StatusUnauthorized, msg: msg, authenticate: true}
}

func errForbidden(msg string) *apiError { return &apiError{code: http.StatusForbidden, msg: msg} }

// authenticate returns the grant of the request's bearer token: nil with
// no error when authentication is off.
func (h *Handler) authenticate(r *http.Request) (*Grant, *apiError) {
	tokens := h.tokens.Load()
	if tokens == nil {
		return nil, nil
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return nil, errUnauthenticated("this ingress requires an API token: send Authorization: Bearer <token>")
	}
	scheme, token, _ := strings.Cut(auth, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, errUnauthenticated("the Authorization header must be Bearer <token>")
	}
	g := tokens.find(token)
	if g == nil {
		return nil, errForbidden("the API token is not valid on this cluster (unknown or revoked)")
	}
	return g, nil
}

// authorize checks that grant g (nil: authentication off) may do what rt
// asks, as far as the path tells. Attach, output and cancel by id of a
// token limited to some services are checked again once the invocation's
// service is known (authorizeInvocation).
func authorize(g *Grant, rt route) *apiError {
	if g == nil {
		return nil
	}
	var flag bool
	var what string
	switch rt.kind {
	case routeCall, routeSend:
		flag, what = true, "call"
	case routeAttach:
		flag, what = g.Attach, "attach"
	case routeOutput, routeLookup:
		flag, what = g.Output, "output"
	case routeCancel:
		flag, what = g.Cancel, "cancel"
	default:
		return nil
	}
	if !flag {
		return errForbidden(fmt.Sprintf("the API token '%s' may not %s invocations", g.Name, what))
	}
	if rt.service != "" && !g.mayCall(rt.service) {
		return errForbidden(fmt.Sprintf("the API token '%s' may not use service '%s'", g.Name, rt.service))
	}
	return nil
}

// authorizeInvocation checks, for a token limited to some services, that
// invocation id belongs to one of them, reading its record (one more
// request to its partition). ok is false when the request is answered
// (refused, or the record could not be read); status is then what was
// written. A grant for all services, or none (authentication off), passes
// at once.
func (h *Handler) authorizeInvocation(w http.ResponseWriter, r *http.Request, g *Grant, part uint32, id invocation.ID) (status int, ok bool) {
	if g == nil || g.allServices() {
		return 0, true
	}
	ctl, isCtl := h.cfg.Dispatcher.(InvocationControl)
	if !isCtl {
		return h.writeError(w, errForbidden(fmt.Sprintf("the API token '%s' is limited to some services: address the invocation by service, handler and idempotency key", g.Name))), false
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), h.cfg.RequestTimeout, errAppendDeadline)
	defer cancel()
	rec, err := ctl.Status(ctx, part, id[:])
	if err != nil {
		return h.lookupFailed(w, ctx, r.Context(), err, part, id), false
	}
	if service := rec.GetInvoke().GetService(); !g.mayCall(service) {
		// 403 rather than the 404 of a missing invocation: it tells the
		// caller to use another token, and ids are unguessable, so it
		// reveals nothing one could not learn otherwise.
		return h.writeError(w, errForbidden(fmt.Sprintf("the API token '%s' may not use the service of invocation %s", g.Name, id))), false
	}
	return 0, true
}
