package rpc_test

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/rpc"
)

// The fuzz targets feed arbitrary bytes to the decoding of every protobuf
// message a node accepts from the network or reads back from its log:
// decoding must never panic, and whatever decodes must survive a
// marshal/unmarshal round trip unchanged. The committed corpus under
// testdata/fuzz/ holds valid encodings of each message, so `go test`
// checks them as ordinary tests and `go test -fuzz` mutates from there.

// roundTrip decodes data into a fresh message of m's type and, when that
// succeeds, checks that re-encoding and decoding again gives the same.
func roundTrip[M proto.Message](t *testing.T, data []byte, newM func() M) (M, bool) {
	m := newM()
	if err := proto.Unmarshal(data, m); err != nil {
		return m, false
	}
	again, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("%T decoded but does not encode: %v", m, err)
	}
	m2 := newM()
	if err := proto.Unmarshal(again, m2); err != nil {
		t.Fatalf("%T re-encoding does not decode: %v", m, err)
	}
	if !proto.Equal(m, m2) {
		t.Fatalf("%T round trip changed the message:\n%v\n%v", m, m, m2)
	}
	return m, true
}

// decodeRaft decodes an envelope's raft message as the raft transport does.
func decodeRaft(data []byte) {
	m := &pb.Message{}
	if proto.Unmarshal(data, m) == nil {
		_ = m.String()
	}
}

func seeds(f *testing.F, msgs ...proto.Message) {
	f.Add([]byte{})
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func raftMessage() []byte {
	u := proto.Uint64
	b, _ := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgApp.Enum(), From: u(2), To: u(1), Term: u(3), LogTerm: u(2),
		Index: u(7), Commit: u(6), Entries: []*pb.Entry{{Term: u(3), Index: u(8), Data: []byte("x")}}})
	return b
}

func FuzzRaftBatch(f *testing.F) {
	seeds(f, &rpc.RaftBatch{From: 2, To: 1, Messages: []*rpc.RaftEnvelope{{Group: 1, Message: raftMessage()}, {Group: 0}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, ok := roundTrip(t, data, func() *rpc.RaftBatch { return &rpc.RaftBatch{} })
		if !ok {
			return
		}
		for _, env := range b.GetMessages() {
			decodeRaft(env.GetMessage())
		}
	})
}

func FuzzRaftMessage(f *testing.F) {
	f.Add(raftMessage())
	f.Fuzz(func(t *testing.T, data []byte) { decodeRaft(data) })
}

func FuzzSnapshotChunk(f *testing.F) {
	u := proto.Uint64
	snap, _ := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgSnap.Enum(), From: u(2), To: u(1), Term: u(4),
		Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: u(10), Term: u(4), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}})
	seeds(f, &rpc.SnapshotChunk{Group: 1, From: 2, To: 1, Message: snap, Data: []byte("chunk"), Last: true})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, ok := roundTrip(t, data, func() *rpc.SnapshotChunk { return &rpc.SnapshotChunk{} })
		if ok {
			decodeRaft(c.GetMessage())
		}
	})
}

func FuzzDispatchRequest(f *testing.F) {
	id := make([]byte, 24)
	seeds(f,
		&rpc.DispatchRequest{CorrelationId: 1, RequestId: make([]byte, 16), Partition: 2, TimeoutMs: 3000,
			Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: &rpc.Invoke{InvocationId: id,
				Service: "Echo", Handler: "echo", Body: []byte(`"hi"`), ContentType: "application/json",
				Headers: []*rpc.Header{{Name: "x", Value: "y"}}, IdempotencyKey: "k", NotBeforeUnixMs: 5}}}},
		&rpc.DispatchRequest{CorrelationId: 2, Partition: 1, Body: &rpc.DispatchRequest_Attach{Attach: &rpc.AttachInvocation{InvocationId: id}}},
		&rpc.DispatchRequest{Body: &rpc.DispatchRequest_PutService{PutService: &rpc.PutService{Service: &rpc.Service{Name: "Echo", Url: "http://127.0.0.1:1", Handlers: []string{"echo"}}}}},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, func() *rpc.DispatchRequest { return &rpc.DispatchRequest{} })
	})
}

func FuzzDispatchResponse(f *testing.F) {
	seeds(f,
		&rpc.DispatchResponse{CorrelationId: 1, Body: &rpc.DispatchResponse_Result{Result: &rpc.InvocationResult{
			InvocationId: make([]byte, 24), Result: &rpc.Result{Status: 200, Body: []byte("{}")}}}},
		&rpc.DispatchResponse{CorrelationId: 2, Body: &rpc.DispatchResponse_Error{Error: &rpc.DispatchError{Code: rpc.DispatchError_NOT_LEADER, Leader: 2, Term: 9}}},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, func() *rpc.DispatchResponse { return &rpc.DispatchResponse{} })
	})
}

func FuzzDispatchRequestBatch(f *testing.F) {
	seeds(f, &rpc.DispatchRequestBatch{Requests: []*rpc.DispatchRequest{
		{CorrelationId: 1, RequestId: make([]byte, 16), Partition: 2,
			Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: &rpc.Invoke{InvocationId: make([]byte, 24), Service: "Echo", Handler: "echo"}}}},
		{CorrelationId: 2, Partition: 1, TimeoutMs: 500, Body: &rpc.DispatchRequest_Attach{Attach: &rpc.AttachInvocation{InvocationId: make([]byte, 24)}}},
		{},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, func() *rpc.DispatchRequestBatch { return &rpc.DispatchRequestBatch{} })
	})
}

func FuzzDispatchResponseBatch(f *testing.F) {
	seeds(f, &rpc.DispatchResponseBatch{Responses: []*rpc.DispatchResponse{
		{CorrelationId: 1, Body: &rpc.DispatchResponse_Appended{Appended: &rpc.Appended{InvocationId: make([]byte, 24)}}},
		{CorrelationId: 2, Body: &rpc.DispatchResponse_Error{Error: &rpc.DispatchError{Code: rpc.DispatchError_LOST_LEADERSHIP}}},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, func() *rpc.DispatchResponseBatch { return &rpc.DispatchResponseBatch{} })
	})
}

func FuzzCommandBatch(f *testing.F) {
	id := make([]byte, 24)
	seeds(f, &rpc.CommandBatch{Version: 1, Commands: []*rpc.Command{
		{Cmd: &rpc.Command_Invoke{Invoke: &rpc.Invoke{InvocationId: id, RequestId: make([]byte, 16), Service: "Echo", Handler: "echo"}}},
		{Cmd: &rpc.Command_Complete{Complete: &rpc.Complete{InvocationId: id, Result: &rpc.Result{Status: 200, Body: []byte("1")}}}},
		{Cmd: &rpc.Command_Cancel{Cancel: &rpc.Cancel{InvocationId: id}}},
		{Cmd: &rpc.Command_Purge{Purge: &rpc.Purge{BeforeUnixMs: 10}}},
		{Cmd: &rpc.Command_AttemptFailed{AttemptFailed: &rpc.AttemptFailed{InvocationId: id, Attempt: 2, Error: "503"}}},
		{Cmd: &rpc.Command_PutService{PutService: &rpc.PutService{Service: &rpc.Service{Name: "Echo", Url: "http://x"}}}},
		{Cmd: &rpc.Command_DeleteService{DeleteService: &rpc.DeleteService{Name: "Echo"}}},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, func() *rpc.CommandBatch { return &rpc.CommandBatch{} })
	})
}

func FuzzInvocationRecord(f *testing.F) {
	seeds(f, &rpc.InvocationRecord{Invoke: &rpc.Invoke{InvocationId: make([]byte, 24), Service: "Echo"},
		State: rpc.InvocationRecord_COMPLETED, Attempts: 1, Result: &rpc.Result{Status: 200}})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, func() *rpc.InvocationRecord { return &rpc.InvocationRecord{} })
	})
}
