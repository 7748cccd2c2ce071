package ingress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/raftgate/raftgate/registry"
)

// maxTargetBody bounds the body of POST /restate/attach|output|lookup.
const maxTargetBody = 16 << 10

// target is the body of POST /restate/attach|output|lookup (Restate 1.7).
type target struct {
	Target         string `json:"target"`
	InvocationID   string `json:"invocationId"`
	Service        string `json:"service"`
	Key            string `json:"key"`
	Handler        string `json:"handler"`
	IdempotencyKey string `json:"idempotencyKey"`
	WorkflowName   string `json:"workflowName"`
	WorkflowKey    string `json:"workflowKey"`
	// Scope is checked but does not change which invocation is meant: an
	// invocation's id is its (service, key, handler, idempotency key) or
	// (workflow, id), whatever scope it was sent in.
	Scope string `json:"scope"`
}

const msgTargetForms = `{"target":"invocation","invocationId":"inv_…"}, ` +
	`{"target":"idempotentInvocation","service":"S","key":"k" (optional),"handler":"h","idempotencyKey":"K"} or ` +
	`{"target":"workflow","workflowName":"W","workflowKey":"id"}`

// readTarget reads the JSON target of POST /restate/attach|output|lookup
// and returns rt addressing it as the older paths do.
func (h *Handler) readTarget(w http.ResponseWriter, r *http.Request, rt route) (route, *apiError) {
	if r.Method != http.MethodPost {
		return rt, errMethod(http.MethodPost + " (with a JSON target), or GET /restate/attach|output/{invocationId}")
	}
	if r.ContentLength > maxTargetBody {
		return rt, bodyTooLarge(w, maxTargetBody)
	}
	body, e := h.readBody(w, r)
	if e != nil {
		return rt, e
	}
	if len(body) > maxTargetBody {
		return rt, bodyTooLarge(w, maxTargetBody)
	}
	var t target
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return rt, errBadRequest(fmt.Sprintf("bad target: %v; send one of %s", err, msgTargetForms))
	}
	if t.Scope != "" {
		if err := registry.ValidateScope(t.Scope); err != nil {
			return rt, errBadRequest("bad target: " + err.Error())
		}
	}
	missing := func(field string) (route, *apiError) {
		return rt, errBadRequest(fmt.Sprintf("bad target %q: %q is required; send one of %s", t.Target, field, msgTargetForms))
	}
	switch t.Target {
	case "invocation":
		if t.InvocationID == "" {
			return missing("invocationId")
		}
		rt.id = t.InvocationID
	case "idempotentInvocation":
		switch {
		case t.Service == "":
			return missing("service")
		case t.Handler == "":
			return missing("handler")
		case t.IdempotencyKey == "":
			return missing("idempotencyKey")
		}
		rt.service, rt.handler, rt.key = t.Service, t.Handler, t.IdempotencyKey
		rt.objectKey, rt.keyed = t.Key, t.Key != ""
	case "workflow":
		switch {
		case t.WorkflowName == "":
			return missing("workflowName")
		case t.WorkflowKey == "":
			return missing("workflowKey")
		}
		rt.service, rt.objectKey, rt.keyed, rt.workflow = t.WorkflowName, t.WorkflowKey, true, true
	default:
		return rt, errBadRequest(fmt.Sprintf(`bad target: "target" is %q; want "invocation", "idempotentInvocation" or "workflow", as in %s`, t.Target, msgTargetForms))
	}
	return rt, nil
}
