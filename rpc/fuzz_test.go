package rpc_test

import (
	"testing"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/rpc"
)

// The fuzz targets feed arbitrary bytes to the decoding of every protobuf
// message a node accepts from an ingress or reads back from its log (the
// transport's are raftlogpb's): decoding must never panic, and whatever
// decodes must survive a marshal/unmarshal round trip unchanged. The
// committed corpus under testdata/fuzz/ holds valid encodings of each
// message, so `go test` checks them as ordinary tests and `go test -fuzz`
// mutates from there.

func FuzzDispatchRequest(f *testing.F) {
	id := make([]byte, 24)
	testutil.Seeds(f,
		&rpc.DispatchRequest{CorrelationId: 1, RequestId: make([]byte, 16), Partition: 2, TimeoutMs: 3000,
			Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: &rpc.Invoke{InvocationId: id,
				Service: "Echo", Handler: "echo", Body: []byte(`"hi"`), ContentType: "application/json",
				Headers: []*rpc.Header{{Name: "x", Value: "y"}}, IdempotencyKey: "k", NotBeforeUnixMs: 5}}}},
		&rpc.DispatchRequest{CorrelationId: 2, Partition: 1, Body: &rpc.DispatchRequest_Attach{Attach: &rpc.AttachInvocation{InvocationId: id}}},
		&rpc.DispatchRequest{Body: &rpc.DispatchRequest_PutService{PutService: &rpc.PutService{Service: &rpc.Service{Name: "Echo", Url: "http://127.0.0.1:1", Handlers: []string{"echo"}}}}},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.RoundTrip(t, data, func() *rpc.DispatchRequest { return &rpc.DispatchRequest{} })
	})
}

func FuzzDispatchResponse(f *testing.F) {
	testutil.Seeds(f,
		&rpc.DispatchResponse{CorrelationId: 1, Body: &rpc.DispatchResponse_Result{Result: &rpc.InvocationResult{
			InvocationId: make([]byte, 24), Result: &rpc.Result{Status: 200, Body: []byte("{}")}}}},
		&rpc.DispatchResponse{CorrelationId: 2, Body: &rpc.DispatchResponse_Error{Error: &rpc.DispatchError{Code: rpc.DispatchError_NOT_LEADER, Leader: 2, Term: 9}}},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.RoundTrip(t, data, func() *rpc.DispatchResponse { return &rpc.DispatchResponse{} })
	})
}

func FuzzDispatchRequestBatch(f *testing.F) {
	testutil.Seeds(f, &rpc.DispatchRequestBatch{Requests: []*rpc.DispatchRequest{
		{CorrelationId: 1, RequestId: make([]byte, 16), Partition: 2,
			Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: &rpc.Invoke{InvocationId: make([]byte, 24), Service: "Echo", Handler: "echo"}}}},
		{CorrelationId: 2, Partition: 1, TimeoutMs: 500, Body: &rpc.DispatchRequest_Attach{Attach: &rpc.AttachInvocation{InvocationId: make([]byte, 24)}}},
		{},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.RoundTrip(t, data, func() *rpc.DispatchRequestBatch { return &rpc.DispatchRequestBatch{} })
	})
}

func FuzzDispatchResponseBatch(f *testing.F) {
	testutil.Seeds(f, &rpc.DispatchResponseBatch{Responses: []*rpc.DispatchResponse{
		{CorrelationId: 1, Body: &rpc.DispatchResponse_Appended{Appended: &rpc.Appended{InvocationId: make([]byte, 24)}}},
		{CorrelationId: 2, Body: &rpc.DispatchResponse_Error{Error: &rpc.DispatchError{Code: rpc.DispatchError_LOST_LEADERSHIP}}},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.RoundTrip(t, data, func() *rpc.DispatchResponseBatch { return &rpc.DispatchResponseBatch{} })
	})
}

func FuzzCommandBatch(f *testing.F) {
	id := make([]byte, 24)
	testutil.Seeds(f, &rpc.CommandBatch{Version: 1, Commands: []*rpc.Command{
		{Cmd: &rpc.Command_Invoke{Invoke: &rpc.Invoke{InvocationId: id, RequestId: make([]byte, 16), Service: "Echo", Handler: "echo"}}},
		{Cmd: &rpc.Command_Complete{Complete: &rpc.Complete{InvocationId: id, Result: &rpc.Result{Status: 200, Body: []byte("1")}}}},
		{Cmd: &rpc.Command_Cancel{Cancel: &rpc.Cancel{InvocationId: id}}},
		{Cmd: &rpc.Command_Purge{Purge: &rpc.Purge{BeforeUnixMs: 10}}},
		{Cmd: &rpc.Command_AttemptFailed{AttemptFailed: &rpc.AttemptFailed{InvocationId: id, Attempt: 2, Error: "503"}}},
		{Cmd: &rpc.Command_PutService{PutService: &rpc.PutService{Service: &rpc.Service{Name: "Echo", Url: "http://x"}}}},
		{Cmd: &rpc.Command_DeleteService{DeleteService: &rpc.DeleteService{Name: "Echo"}}},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.RoundTrip(t, data, func() *rpc.CommandBatch { return &rpc.CommandBatch{} })
	})
}

func FuzzInvocationRecord(f *testing.F) {
	testutil.Seeds(f, &rpc.InvocationRecord{Invoke: &rpc.Invoke{InvocationId: make([]byte, 24), Service: "Echo"},
		State: rpc.InvocationRecord_COMPLETED, Attempts: 1, Result: &rpc.Result{Status: 200}})
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.RoundTrip(t, data, func() *rpc.InvocationRecord { return &rpc.InvocationRecord{} })
	})
}
