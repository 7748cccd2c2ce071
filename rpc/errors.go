package rpc

import (
	"errors"
	"fmt"
)

// Errors of the dispatch protocol. Partition processors return them (wrapped
// or not), the dispatch server sends them with ToProto, and the dispatch
// client turns them back into these values with FromProto, so callers on
// both sides branch with errors.Is / errors.As.
var (
	// ErrLostLeadership: the leader stepped down while the request was
	// pending. Ambiguous (the entry may still commit); retrying the same
	// request is safe because invocations are de-duplicated by id.
	ErrLostLeadership = errors.New("lost leadership")
	// ErrNotFound: no such invocation (or its result was purged), or no such
	// service.
	ErrNotFound = errors.New("not found")
	// ErrNotReady: the invocation exists but has no result yet.
	ErrNotReady = errors.New("not ready")
	// ErrInvalid: the request is malformed; retrying it will not help.
	ErrInvalid = errors.New("invalid request")
	// ErrOverloaded: back pressure; nothing was done, retry later.
	ErrOverloaded = errors.New("overloaded")
	// ErrStaleRegistry: an append was checked against a registration of its
	// service that has been replaced or removed since; nothing was stored.
	// The caller looks the service up again, caught up, and retries.
	ErrStaleRegistry = errors.New("service registration changed since it was checked")
	// ErrUnavailable: no leader answered before the request's deadline (the
	// dispatch client's verdict), or a leader could not complete a request
	// that took effect in part. Retrying the same request later is safe.
	ErrUnavailable = errors.New("partition unavailable")
	// ErrConflict: the change does not apply to the current state: an
	// operator's action on an invocation in another state (resume of a
	// completed one, purge of a pending one), or a scope rule's expected
	// version that is not the current one; nothing changed.
	ErrConflict = errors.New("conflict")
	// ErrKeyReused: an append's idempotency key names an invocation with
	// another request body, and reuse was to be refused; nothing stored.
	ErrKeyReused = errors.New("idempotency key reused with another request")
)

// NotLeaderError says that nothing was proposed because this node does not
// lead the partition. Leader is the leader it knows (0 when none) at Term.
// Always safe to retry at the leader.
type NotLeaderError struct {
	Leader uint64
	Term   uint64
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("not leader (no known leader, term %d)", e.Term)
	}
	return fmt.Sprintf("not leader (leader is node %d, term %d)", e.Leader, e.Term)
}

// ToProto maps an error to its wire form. Errors that are not dispatch
// errors travel as UNKNOWN with their text.
func ToProto(err error) *DispatchError {
	var nl *NotLeaderError
	switch {
	case errors.As(err, &nl):
		return &DispatchError{Code: DispatchError_NOT_LEADER, Message: err.Error(), Leader: nl.Leader, Term: nl.Term}
	case errors.Is(err, ErrLostLeadership):
		return &DispatchError{Code: DispatchError_LOST_LEADERSHIP, Message: err.Error()}
	case errors.Is(err, ErrNotFound):
		return &DispatchError{Code: DispatchError_NOT_FOUND, Message: err.Error()}
	case errors.Is(err, ErrNotReady):
		return &DispatchError{Code: DispatchError_NOT_READY, Message: err.Error()}
	case errors.Is(err, ErrInvalid):
		return &DispatchError{Code: DispatchError_INVALID, Message: err.Error()}
	case errors.Is(err, ErrOverloaded):
		return &DispatchError{Code: DispatchError_OVERLOADED, Message: err.Error()}
	case errors.Is(err, ErrStaleRegistry):
		return &DispatchError{Code: DispatchError_STALE_REGISTRY, Message: err.Error()}
	case errors.Is(err, ErrUnavailable):
		return &DispatchError{Code: DispatchError_UNAVAILABLE, Message: err.Error()}
	case errors.Is(err, ErrConflict):
		return &DispatchError{Code: DispatchError_CONFLICT, Message: err.Error()}
	case errors.Is(err, ErrKeyReused):
		return &DispatchError{Code: DispatchError_KEY_REUSED, Message: err.Error()}
	default:
		return &DispatchError{Code: DispatchError_UNKNOWN, Message: err.Error()}
	}
}

// FromProto maps a wire error back to a Go error that matches the sentinels
// above with errors.Is (and *NotLeaderError with errors.As).
func FromProto(e *DispatchError) error {
	if e == nil {
		return nil
	}
	var base error
	switch e.Code {
	case DispatchError_NOT_LEADER:
		return &NotLeaderError{Leader: e.Leader, Term: e.Term}
	case DispatchError_LOST_LEADERSHIP:
		base = ErrLostLeadership
	case DispatchError_NOT_FOUND:
		base = ErrNotFound
	case DispatchError_NOT_READY:
		base = ErrNotReady
	case DispatchError_INVALID:
		base = ErrInvalid
	case DispatchError_OVERLOADED:
		base = ErrOverloaded
	case DispatchError_STALE_REGISTRY:
		base = ErrStaleRegistry
	case DispatchError_UNAVAILABLE:
		base = ErrUnavailable
	case DispatchError_CONFLICT:
		base = ErrConflict
	case DispatchError_KEY_REUSED:
		base = ErrKeyReused
	default:
		return errors.New(e.Message)
	}
	if e.Message == "" || e.Message == base.Error() {
		return base
	}
	return &remoteError{base: base, msg: e.Message}
}

// remoteError keeps the server's message while matching its sentinel.
type remoteError struct {
	base error
	msg  string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.base }
