package ingress

import (
	"net/url"
	"strings"

	"github.com/raftgate/raftgate/registry"
)

// routeKind is what a request path asks for.
type routeKind uint8

const (
	routeOther routeKind = iota // unknown; only used as a metrics label
	routeCall
	routeSend
	routeAttach
	routeOutput
	routeCancel
	routeHealth
	// routeLookup: POST /restate/lookup, the invocation id of a target.
	routeLookup
)

// label names the route in metrics.
func (k routeKind) label() string {
	switch k {
	case routeCall:
		return "call"
	case routeSend:
		return "send"
	case routeAttach:
		return "attach"
	case routeOutput:
		return "output"
	case routeCancel:
		return "cancel"
	case routeHealth:
		return "health"
	case routeLookup:
		return "lookup"
	default:
		return "other"
	}
}

// route is a parsed request path. Segments are percent-decoded.
type route struct {
	kind routeKind
	// service and handler: call and send, and attach/output by idempotency
	// key.
	service, handler string
	// key is the idempotency key of attach/output by key.
	key string
	// objectKey is the key of a keyed service (an object's key, a
	// workflow's id); keyed says the path had one.
	objectKey string
	keyed     bool
	// sendOrKeyed marks POST /{a}/{b}/send: a send of handler b of a plain
	// service, or a call of the handler named send of object a's key b.
	// Only the registry can tell (as in Restate); see resolve.
	sendOrKeyed bool
	// workflow: attach/output of a workflow's run by workflow id.
	workflow bool
	// id is the printed invocation id of attach/output by id (not yet
	// validated: parseInvocationID does that).
	id string
	// scope: a call or send under /restate/scope/{scope}/ (Restate 1.7).
	scope string
	// target: POST /restate/attach|output|lookup, whose body names the
	// invocation (readTarget fills the fields above from it).
	target bool
}

// byKey reports whether an attach/output route addresses the invocation by
// idempotency key.
func (r route) byKey() bool { return r.id == "" && r.key != "" }

// resolve fixes a call or send route for a service of kind keyed
// (object or workflow) or not, or says why the path does not fit it.
func (r route) resolve(svc string, keyed bool) (route, *apiError) {
	if r.sendOrKeyed && keyed {
		return route{kind: routeCall, service: r.service, objectKey: r.handler, handler: "send", keyed: true}, nil
	}
	switch {
	case r.keyed && !keyed:
		return r, errBadRequest("bad path: '" + svc + "' is a plain service, called with POST /" + svc + "/{handler} (or .../send), without a key")
	case !r.keyed && keyed:
		return r, errBadRequest("bad path: '" + svc + "' is a virtual object or workflow, called with POST /" + svc + "/{key}/{handler} (or .../send)")
	}
	return r, nil
}

// Path errors. Messages say what the ingress expects.
const (
	msgBadServicePath    = "bad path: expected POST /{service}/{handler} (call), POST /{service}/{handler}/send (send), or for a virtual object or workflow POST /{name}/{key}/{handler} and .../send"
	msgBadInvocationPath = "bad path: expected GET /restate/invocation/{invocationId}/attach, /restate/invocation/{invocationId}/output, /restate/invocation/{service}/{handler}/{idempotencyKey}/attach or /output, or /restate/invocation/{object}/{key}/{handler}/{idempotencyKey}/attach or /output, or PATCH /restate/invocation/{invocationId}/cancel"
	msgBadWorkflowPath   = "bad path: expected GET /restate/workflow/{workflow}/{id}/attach or /restate/workflow/{workflow}/{id}/output"
	msgBadCallPath       = "bad path: expected POST /restate/call|send/{service}/{handler}, /restate/call|send/{service}/{key}/{handler}, or the same under /restate/scope/{scope}/"
	msgBadAttachPath     = "bad path: expected GET /restate/attach|output/{invocationId}, or POST /restate/attach|output|lookup with a JSON target"
)

// maxSegments bounds the segments the parser looks at; no route has more
// than 7.
const maxSegments = 8

// parsePath parses an escaped request path (url.URL.EscapedPath). One
// trailing slash is ignored, as Restate's ingress does. Errors are 400 for a
// malformed path and 404 for a path that names no endpoint.
func parsePath(escaped string) (route, *apiError) {
	if !strings.HasPrefix(escaped, "/") {
		return route{}, errBadRequest(msgBadServicePath)
	}
	p := escaped[1:]
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return route{}, errNotFound("no endpoint at /: call a handler with POST /{service}/{handler}")
	}
	var seg [maxSegments]string
	n := 0
	for {
		i := strings.IndexByte(p, '/')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if n == maxSegments {
			return route{}, tooManySegments(seg[0])
		}
		if part == "" {
			return route{}, errBadRequest("bad path: empty path segment (double slash) in " + quotePath(escaped))
		}
		if strings.IndexByte(part, '%') >= 0 {
			dec, err := url.PathUnescape(part)
			if err != nil || dec == "" {
				return route{}, errBadRequest("bad path: invalid percent-encoding in segment " + quotePath(part))
			}
			part = dec
		}
		seg[n] = part
		n++
		if i < 0 {
			break
		}
		p = p[i+1:]
	}
	if seg[0] == "restate" {
		return parseRestatePath(seg[:n])
	}
	switch {
	case n == 2:
		return route{kind: routeCall, service: seg[0], handler: seg[1]}, nil
	case n == 3 && seg[2] == "send":
		return route{kind: routeSend, service: seg[0], handler: seg[1], sendOrKeyed: true}, nil
	case n == 3:
		return route{kind: routeCall, service: seg[0], objectKey: seg[1], handler: seg[2], keyed: true}, nil
	case n == 4 && seg[3] == "send":
		return route{kind: routeSend, service: seg[0], objectKey: seg[1], handler: seg[2], keyed: true}, nil
	default:
		return route{}, errBadRequest(msgBadServicePath)
	}
}

func tooManySegments(first string) *apiError {
	if first == "restate" {
		return errBadRequest(msgBadInvocationPath)
	}
	return errBadRequest(msgBadServicePath)
}

// parseRestatePath parses the paths under /restate/.
func parseRestatePath(seg []string) (route, *apiError) {
	if len(seg) < 2 {
		return route{}, errNotFound("no endpoint at /restate: see /restate/health and /restate/invocation/...")
	}
	switch seg[1] {
	case "health":
		if len(seg) == 2 {
			return route{kind: routeHealth}, nil
		}
	case "invocation":
		return parseInvocationPath(seg[2:])
	case "workflow":
		return parseWorkflowPath(seg[2:])
	case "call", "send":
		return parseCallPath(seg[1], seg[2:], "")
	case "scope":
		if len(seg) < 4 || (seg[3] != "call" && seg[3] != "send") {
			return route{}, errBadRequest(msgBadCallPath)
		}
		if err := registry.ValidateScope(seg[2]); err != nil {
			return route{}, errBadRequest("bad path: " + err.Error())
		}
		return parseCallPath(seg[3], seg[4:], seg[2])
	case "attach", "output", "lookup":
		return parseAttachPath(seg[1], seg[2:])
	}
	return route{}, errNotFound("no endpoint at /restate/" + seg[1] + ": the ingress serves /restate/health, /restate/call/..., /restate/send/..., /restate/scope/..., /restate/attach, /restate/output, /restate/lookup, /restate/invocation/... and /restate/workflow/...")
}

// parseCallPath parses what follows /restate/call/ or /restate/send/ (verb
// names which), in scope ("" for none). Unlike the older paths, the verb
// says call or send, so {service}/{key}/{handler} is never ambiguous.
func parseCallPath(verb string, seg []string, scope string) (route, *apiError) {
	r := route{kind: routeCall, scope: scope}
	if verb == "send" {
		r.kind = routeSend
	}
	switch len(seg) {
	case 2:
		r.service, r.handler = seg[0], seg[1]
	case 3:
		r.service, r.objectKey, r.handler, r.keyed = seg[0], seg[1], seg[2], true
	default:
		return route{}, errBadRequest(msgBadCallPath)
	}
	return r, nil
}

// parseAttachPath parses what follows /restate/attach, /restate/output and
// /restate/lookup: an invocation id, or nothing (the target is in the
// body; lookup has only that form).
func parseAttachPath(verb string, seg []string) (route, *apiError) {
	r := route{kind: routeAttach}
	switch verb {
	case "output":
		r.kind = routeOutput
	case "lookup":
		r.kind = routeLookup
	}
	switch {
	case len(seg) == 0:
		r.target = true
	case len(seg) == 1 && r.kind != routeLookup:
		r.id = seg[0]
	default:
		return route{}, errBadRequest(msgBadAttachPath)
	}
	return r, nil
}

// parseInvocationPath parses what follows /restate/invocation/.
func parseInvocationPath(seg []string) (route, *apiError) {
	var r route
	switch len(seg) {
	case 2:
		r.id = seg[0]
	case 4:
		r.service, r.handler, r.key = seg[0], seg[1], seg[2]
	case 5:
		r.service, r.objectKey, r.handler, r.key, r.keyed = seg[0], seg[1], seg[2], seg[3], true
	default:
		return route{}, errBadRequest(msgBadInvocationPath)
	}
	switch seg[len(seg)-1] {
	case "attach":
		r.kind = routeAttach
	case "output":
		r.kind = routeOutput
	case "cancel":
		if r.id == "" {
			return route{}, errBadRequest(msgBadInvocationPath)
		}
		r.kind = routeCancel
	default:
		return route{}, errBadRequest(msgBadInvocationPath)
	}
	return r, nil
}

// parseWorkflowPath parses what follows /restate/workflow/.
func parseWorkflowPath(seg []string) (route, *apiError) {
	if len(seg) != 3 {
		return route{}, errBadRequest(msgBadWorkflowPath)
	}
	r := route{service: seg[0], objectKey: seg[1], keyed: true, workflow: true}
	switch seg[2] {
	case "attach":
		r.kind = routeAttach
	case "output":
		r.kind = routeOutput
	default:
		return route{}, errBadRequest(msgBadWorkflowPath)
	}
	return r, nil
}

// quotePath shortens and quotes user input echoed in an error message.
func quotePath(s string) string {
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return "'" + s + "'"
}
