package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftgate/raftgate/rpc"
)

// Operation names, used in metrics and logs.
const (
	opAppend        = "append"
	opCall          = "call"
	opOutput        = "output"
	opAttach        = "attach"
	opStatus        = "status"
	opCancel        = "cancel"
	opList          = "list"
	opPutService    = "put_service"
	opDeleteService = "delete_service"
	opKeyStatus     = "key_status"
	opFenceService  = "fence_service"
	opAction        = "action"
	opBulk          = "bulk"
	opOperation     = "operation"
	opSchedule      = "schedule"
	opPutRule       = "put_rule"
	opDeleteRule    = "delete_rule"
	opBacklog       = "backlog"
	opUnknown       = "unknown"
)

// errEmptyAnswer is sent when a backend returns neither a value nor an error.
var errEmptyAnswer = errors.New("dispatch: backend returned no answer")

// opOf names the operation of a request.
func opOf(req *rpc.DispatchRequest) string {
	switch req.Body.(type) {
	case *rpc.DispatchRequest_Append:
		if req.GetAppend().GetAttach() {
			return opCall
		}
		return opAppend
	case *rpc.DispatchRequest_Output:
		return opOutput
	case *rpc.DispatchRequest_Attach:
		return opAttach
	case *rpc.DispatchRequest_Status:
		return opStatus
	case *rpc.DispatchRequest_Cancel:
		return opCancel
	case *rpc.DispatchRequest_List:
		return opList
	case *rpc.DispatchRequest_PutService:
		return opPutService
	case *rpc.DispatchRequest_DeleteService:
		return opDeleteService
	case *rpc.DispatchRequest_KeyStatus:
		return opKeyStatus
	case *rpc.DispatchRequest_FenceService:
		return opFenceService
	case *rpc.DispatchRequest_Action:
		return opAction
	case *rpc.DispatchRequest_Bulk:
		return opBulk
	case *rpc.DispatchRequest_Operation:
		return opOperation
	case *rpc.DispatchRequest_Schedule:
		return opSchedule
	case *rpc.DispatchRequest_PutRule:
		return opPutRule
	case *rpc.DispatchRequest_DeleteRule:
		return opDeleteRule
	case *rpc.DispatchRequest_Backlog:
		return opBacklog
	default:
		return opUnknown
	}
}

// execute runs one request against the backend and builds its answer
// (without correlation id).
func execute(ctx context.Context, b Backend, req *rpc.DispatchRequest) *rpc.DispatchResponse {
	p := req.Partition
	var resp *rpc.DispatchResponse
	var err error
	switch r := req.Body.(type) {
	case *rpc.DispatchRequest_Append:
		if r.Append.GetInvoke() == nil {
			return errorResponse(fmt.Errorf("%w: append without invoke", rpc.ErrInvalid))
		}
		var a *rpc.Appended
		if cb, ok := b.(CallBackend); ok && r.Append.Attach {
			a, err = cb.Call(ctx, p, r.Append.Invoke)
		} else {
			a, err = b.Append(ctx, p, r.Append.Invoke)
		}
		if a != nil {
			resp = &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Appended{Appended: a}}
		}
	case *rpc.DispatchRequest_Output:
		var res *rpc.InvocationResult
		if res, err = b.Output(ctx, p, r.Output.GetInvocationId()); res != nil {
			resp = resultResponse(res)
		}
	case *rpc.DispatchRequest_Attach:
		var res *rpc.InvocationResult
		if res, err = b.Attach(ctx, p, r.Attach.GetInvocationId()); res != nil {
			resp = resultResponse(res)
		}
	case *rpc.DispatchRequest_Status:
		var rec *rpc.InvocationRecord
		if rec, err = b.Status(ctx, p, r.Status.GetInvocationId()); rec != nil {
			resp = &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Status{Status: &rpc.InvocationStatus{Record: rec}}}
		}
	case *rpc.DispatchRequest_Cancel:
		err = b.Cancel(ctx, p, req.RequestId, r.Cancel.GetInvocationId())
		resp = doneResponse()
	case *rpc.DispatchRequest_List:
		var list *rpc.InvocationList
		if list, err = b.List(ctx, p, r.List); list != nil {
			resp = &rpc.DispatchResponse{Body: &rpc.DispatchResponse_List{List: list}}
		}
	case *rpc.DispatchRequest_PutService:
		if r.PutService.GetService() == nil {
			return errorResponse(fmt.Errorf("%w: put_service without service", rpc.ErrInvalid))
		}
		err = b.PutService(ctx, r.PutService.Service)
		resp = doneResponse()
	case *rpc.DispatchRequest_DeleteService:
		err = b.DeleteService(ctx, r.DeleteService.GetName())
		resp = doneResponse()
	case *rpc.DispatchRequest_FenceService:
		f := r.FenceService
		err = b.FenceService(ctx, p, req.RequestId, f.GetName(), f.GetIndex())
		resp = doneResponse()
	case *rpc.DispatchRequest_KeyStatus:
		kb, ok := b.(KeyBackend)
		if !ok {
			return errorResponse(fmt.Errorf("%w: this node does not serve key status", rpc.ErrInvalid))
		}
		var ks *rpc.KeyState
		if ks, err = kb.KeyStatus(ctx, p, r.KeyStatus.GetService(), r.KeyStatus.GetKey()); ks != nil {
			resp = &rpc.DispatchResponse{Body: &rpc.DispatchResponse_KeyState{KeyState: ks}}
		}
	case *rpc.DispatchRequest_Backlog:
		bb, ok := b.(BacklogBackend)
		if !ok {
			return errorResponse(fmt.Errorf("%w: this node does not serve backlogs", rpc.ErrInvalid))
		}
		var bl *rpc.ServiceBacklog
		if bl, err = bb.Backlog(ctx, p, r.Backlog.GetService()); bl != nil {
			resp = &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Backlog{Backlog: bl}}
		}
	case *rpc.DispatchRequest_Action, *rpc.DispatchRequest_Bulk, *rpc.DispatchRequest_Operation:
		lb, ok := b.(LifecycleBackend)
		if !ok {
			return errorResponse(fmt.Errorf("%w: this node does not serve invocation actions", rpc.ErrInvalid))
		}
		resp, err = executeLifecycle(ctx, lb, req)
	case *rpc.DispatchRequest_Schedule:
		sb, ok := b.(ScheduleBackend)
		if !ok {
			return errorResponse(fmt.Errorf("%w: this node does not serve schedules", rpc.ErrInvalid))
		}
		var list *rpc.ScheduleList
		if list, err = sb.Schedule(ctx, p, r.Schedule); list != nil {
			resp = &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Schedules{Schedules: list}}
		}
	case *rpc.DispatchRequest_PutRule, *rpc.DispatchRequest_DeleteRule:
		rb, ok := b.(RuleBackend)
		if !ok {
			return errorResponse(fmt.Errorf("%w: this node does not serve scope rules", rpc.ErrInvalid))
		}
		if put := req.GetPutRule(); put != nil {
			var rule *rpc.Rule
			if rule, err = rb.PutRule(ctx, put.GetRule(), put.GetExpectedVersion()); rule != nil {
				resp = &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Rule{Rule: rule}}
			}
		} else {
			del := req.GetDeleteRule()
			err = rb.DeleteRule(ctx, del.GetPattern(), del.GetExpectedVersion())
			resp = doneResponse()
		}
	default:
		return errorResponse(fmt.Errorf("%w: empty or unknown request body", rpc.ErrInvalid))
	}
	switch {
	case err != nil:
		return errorResponse(err)
	case resp == nil:
		return errorResponse(errEmptyAnswer)
	}
	return resp
}

// executeLifecycle runs an operator's action or bulk request.
func executeLifecycle(ctx context.Context, b LifecycleBackend, req *rpc.DispatchRequest) (*rpc.DispatchResponse, error) {
	var op *rpc.Operation
	var err error
	switch r := req.Body.(type) {
	case *rpc.DispatchRequest_Action:
		a, err := b.Action(ctx, req.Partition, req.RequestId, r.Action)
		if err != nil {
			return nil, err
		}
		if a != nil {
			return &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Appended{Appended: a}}, nil
		}
		return doneResponse(), nil
	case *rpc.DispatchRequest_Bulk:
		op, err = b.Bulk(ctx, req.Partition, req.RequestId, r.Bulk)
	case *rpc.DispatchRequest_Operation:
		op, err = b.Operation(ctx, req.Partition, r.Operation.GetOperationId())
	}
	if err != nil || op == nil {
		return nil, err
	}
	return &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Operation{Operation: op}}, nil
}

func resultResponse(r *rpc.InvocationResult) *rpc.DispatchResponse {
	return &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Result{Result: r}}
}

func doneResponse() *rpc.DispatchResponse {
	return &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Done{Done: &rpc.Done{}}}
}

func errorResponse(err error) *rpc.DispatchResponse {
	return &rpc.DispatchResponse{Body: &rpc.DispatchResponse_Error{Error: rpc.ToProto(err)}}
}
