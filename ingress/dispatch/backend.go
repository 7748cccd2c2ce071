package dispatch

import (
	"context"

	"github.com/raftgate/raftgate/rpc"
)

// Backend executes dispatch requests on this node. The binary implements it
// over the node's partition processors (partition 0 is the metadata group).
//
// Every method is called from many goroutines at once, one per request, and
// must return when ctx ends (the stream broke, the caller's timeout passed,
// or the server is closing). Errors are the rpc package's typed errors
// (*rpc.NotLeaderError, rpc.ErrLostLeadership, rpc.ErrNotFound, ...), wrapped
// or not; anything else reaches the caller as an UNKNOWN error with its text.
type Backend interface {
	Append(ctx context.Context, partition uint32, inv *rpc.Invoke) (*rpc.Appended, error)
	Output(ctx context.Context, partition uint32, id []byte) (*rpc.InvocationResult, error)
	Attach(ctx context.Context, partition uint32, id []byte) (*rpc.InvocationResult, error)
	Status(ctx context.Context, partition uint32, id []byte) (*rpc.InvocationRecord, error)
	Cancel(ctx context.Context, partition uint32, requestID, id []byte) error
	List(ctx context.Context, partition uint32, req *rpc.ListInvocations) (*rpc.InvocationList, error)
	PutService(ctx context.Context, svc *rpc.Service) error
	DeleteService(ctx context.Context, name string) error
	// FenceService makes partition refuse invocations of service checked
	// against a registration older than index (rpc.FenceService).
	FenceService(ctx context.Context, partition uint32, requestID []byte, service string, index uint64) error
}

// CallBackend is a Backend that also serves calls: an append with attach
// set. A Backend without it answers them as plain appends (no result), as a
// node of an older release does, and the caller attaches by id.
type CallBackend interface {
	// Call appends inv and, once applied, waits for its result until ctx
	// ends or leadership is lost: Appended.Result is set if it came.
	Call(ctx context.Context, partition uint32, inv *rpc.Invoke) (*rpc.Appended, error)
}

// KeyBackend is a Backend that also answers key status requests (GET
// /objects/{object}/{key}); a Backend without it answers them INVALID.
type KeyBackend interface {
	// KeyStatus returns the running invocation and queue length of one key
	// of a keyed service in partition.
	KeyStatus(ctx context.Context, partition uint32, service, key string) (*rpc.KeyState, error)
}

// BacklogBackend is a Backend that also answers backlog requests (GET
// /services/{name}); a Backend without it answers them INVALID.
type BacklogBackend interface {
	// Backlog returns where service's deliveries are in partition, read
	// at its leader.
	Backlog(ctx context.Context, partition uint32, service string) (*rpc.ServiceBacklog, error)
}

// LifecycleBackend is a Backend that also serves operators' actions on
// invocations; a Backend without it answers them INVALID.
type LifecycleBackend interface {
	// Action applies an action to one invocation (restart answers the new
	// invocation's id).
	Action(ctx context.Context, partition uint32, requestID []byte, a *rpc.InvocationAction) (*rpc.Appended, error)
	// Bulk starts (or dry-runs) a bulk operation on partition.
	Bulk(ctx context.Context, partition uint32, requestID []byte, req *rpc.BulkRequest) (*rpc.Operation, error)
	// Operation reads partition's state of a bulk operation.
	Operation(ctx context.Context, partition uint32, id string) (*rpc.Operation, error)
}

// ScheduleBackend is a Backend that also serves schedule requests (admin
// /schedules); a Backend without it answers them INVALID.
type ScheduleBackend interface {
	// Schedule changes or reads the schedules of partition (see
	// rpc.ScheduleRequest); a change returns once applied.
	Schedule(ctx context.Context, partition uint32, req *rpc.ScheduleRequest) (*rpc.ScheduleList, error)
}

// RuleBackend is a Backend that also changes scope rules (admin /rules,
// metadata group); a Backend without it answers them INVALID.
type RuleBackend interface {
	// PutRule stores rule if its version is expected (0: new) and returns
	// it as stored; rpc.ErrConflict otherwise.
	PutRule(ctx context.Context, rule *rpc.Rule, expected uint64) (*rpc.Rule, error)
	// DeleteRule removes the rule of pattern if its version is expected
	// (0: any); rpc.ErrNotFound or rpc.ErrConflict otherwise.
	DeleteRule(ctx context.Context, pattern string, expected uint64) error
}
