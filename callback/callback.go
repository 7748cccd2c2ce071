package callback

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Headers of a callback POST, in canonical form.
const (
	// HeaderURL is the send's header naming its callback URL.
	HeaderURL = "X-Raftgate-Callback"
	// HeaderID is the id a receiver de-duplicates on: the invocation's
	// id, as an invocation completes once.
	HeaderID = "X-Raftgate-Callback-Id"
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256 of the body.
	HeaderSignature = "X-Raftgate-Signature"
)

// MaxURLLen bounds a callback URL (it is stored with the invocation).
const MaxURLLen = 2048

// ErrNotAllowed is returned (wrapped) for a URL outside the allow-list.
var ErrNotAllowed = errors.New("callback URL not allowed")

// Allow is a list of allowed origins (scheme://host[:port]); the zero
// Allow allows nothing.
type Allow struct {
	origins map[string]bool
}

// ParseAllow parses origins ("http://127.0.0.1:9000", "https://hooks.example"),
// as --callback-allow gives them. A path, query or user info is refused:
// an origin is all that is matched.
func ParseAllow(origins []string) (Allow, error) {
	a := Allow{origins: make(map[string]bool, len(origins))}
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		origin, err := originOf(strings.TrimSuffix(o, "/"))
		if err != nil {
			return Allow{}, fmt.Errorf("callback: allow-list entry %q: %w", o, err)
		}
		if origin != strings.ToLower(strings.TrimSuffix(o, "/")) {
			return Allow{}, fmt.Errorf("callback: allow-list entry %q: want an origin only (scheme://host[:port]), like %q", o, origin)
		}
		a.origins[origin] = true
	}
	return a, nil
}

// Empty reports whether a allows no URL at all.
func (a Allow) Empty() bool { return len(a.origins) == 0 }

// Check returns nil when raw is an absolute http(s) URL whose origin is
// allowed; otherwise an error wrapping ErrNotAllowed that says why.
func (a Allow) Check(raw string) error {
	if len(raw) > MaxURLLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrNotAllowed, MaxURLLen)
	}
	origin, err := originOf(raw)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotAllowed, err)
	}
	if !a.origins[origin] {
		if a.Empty() {
			return fmt.Errorf("%w: origin %s: no callback origins are allowed on this cluster (server flag --callback-allow)", ErrNotAllowed, origin)
		}
		return fmt.Errorf("%w: origin %s is not in the cluster's --callback-allow list", ErrNotAllowed, origin)
	}
	return nil
}

// originOf is scheme://host[:port] of an absolute http(s) URL, lowercased.
func originOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("want an http or https URL")
	case u.Host == "" || u.Hostname() == "":
		return "", errors.New("want an absolute URL with a host")
	case u.User != nil:
		return "", errors.New("user info is not allowed in a callback URL")
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// Payload is the JSON body of a callback POST.
type Payload struct {
	InvocationID string `json:"invocationId"`
	// Status is "succeeded" or "failed" (a failure the service answered,
	// retries exhausted, a cancellation or a kill).
	Status string `json:"status"`
	// Code is the result's HTTP status (the service's, or the one raftgate
	// chose for a failure of its own, 409 for a cancellation).
	Code           uint32 `json:"code"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// Result is the result body: JSON as it is when it is valid JSON,
	// else a JSON string of it (UTF-8 text) or null (no body).
	Result json.RawMessage `json:"result"`
	// Error is raftgate's reason for a failure it produced itself.
	Error string `json:"error,omitempty"`
}

// ResultJSON is body as Payload.Result carries it.
func ResultJSON(body []byte) json.RawMessage {
	switch {
	case len(body) == 0:
		return json.RawMessage("null")
	case json.Valid(body):
		return json.RawMessage(body)
	}
	s, _ := json.Marshal(string(body)) // invalid UTF-8 becomes U+FFFD
	return s
}

// Sign returns the x-raftgate-signature value of body under secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether signature (an x-raftgate-signature value) is
// body's under secret, in constant time.
func Verify(secret, body []byte, signature string) bool {
	got, ok := strings.CutPrefix(signature, "sha256=")
	if !ok {
		return false
	}
	sum, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(sum, mac.Sum(nil))
}
