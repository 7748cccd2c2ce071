// Package client is a small Go client for raftgate's HTTP ingress, for
// programs that invoke services through raftgate (the ingress API is the
// one Restate's clients speak; see docs/api.md).
//
// It owns nothing but the HTTP conventions: paths, the idempotency-key
// header, ?delay= and ?timeout=, the x-restate-id header, the JSON error
// format (turned into *Error) and status 470 (ErrNotReady).
//
// Retries are left to the caller: an *Error with RetryAfter > 0 (429, 503)
// may be retried, and a retry is safe when the request carries an
// idempotency key (WithIdempotencyKey).
package client
