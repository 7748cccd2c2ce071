package partition

import (
	"crypto/sha256"

	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// deterministic marshalling: every replica must store the same bytes.
var marshalOpts = proto.MarshalOptions{Deterministic: true}

// sizedMarshalOpts marshals a message marshalOpts.Size just measured,
// reusing the sizes it cached.
var sizedMarshalOpts = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}

func invokeCmd(c *rpc.Invoke) *rpc.Command { return &rpc.Command{Cmd: &rpc.Command_Invoke{Invoke: c}} }

// invokeBox holds an Invoke and its Command in one allocation (a proposal
// in stampedInvokeCmd, an applied one in decodeBatch).
type invokeBox struct {
	inv   rpc.Invoke
	delay int64 // inv.DelayMs points here when set
	oneof rpc.Command_Invoke
	cmd   rpc.Command
}

// stampedInvokeCmd is an Invoke command of a shallow copy of inv stamped
// with the proposal time: inv is left as it is (a caller resends it on a
// retry), and its byte slices are shared, never modified, only marshalled.
// A delayed send's not-before time is stamped too, proposal time + delay,
// so that one clock, the proposer's, places both (delayedExclusive
// compares them); an inv without a delay keeps the not-before it carries
// (an ingress older than Invoke.delay_ms stamps it with its own clock).
// Every field of rpc.Invoke must be copied here (TestStampedInvokeCopiesEveryField).
func stampedInvokeCmd(inv *rpc.Invoke, proposedAtUnixMs int64) *rpc.Command {
	b := &invokeBox{}
	c := &b.inv
	c.InvocationId = inv.InvocationId
	c.RequestId = inv.RequestId
	c.Service = inv.Service
	c.Handler = inv.Handler
	c.Body = inv.Body
	c.ContentType = inv.ContentType
	c.Headers = inv.Headers
	c.IdempotencyKey = inv.IdempotencyKey
	c.ProposerTerm = inv.ProposerTerm // deprecated, but copied as proto.Clone would
	c.NotBeforeUnixMs = inv.NotBeforeUnixMs
	c.Key = inv.Key
	c.Exclusive = inv.Exclusive
	c.ServiceRegisteredIndex = inv.ServiceRegisteredIndex
	c.ProposedAtUnixMs = proposedAtUnixMs
	c.RejectReusedKey = inv.RejectReusedKey
	c.BodyDigest = inv.BodyDigest
	if c.BodyDigest == nil && c.IdempotencyKey != "" && len(c.Body) > RequestPreviewBytes {
		// Its record keeps only a preview once completed: a reuse of its
		// key is compared by digest (sameRequest).
		sum := sha256.Sum256(c.Body)
		c.BodyDigest = sum[:]
	}
	c.ScheduleId = inv.ScheduleId
	c.ScheduledAtUnixMs = inv.ScheduledAtUnixMs
	c.CallbackUrl = inv.CallbackUrl
	c.Scope = inv.Scope
	c.Priority = inv.Priority
	if inv.DelayMs != nil {
		b.delay = *inv.DelayMs
		c.DelayMs = &b.delay
		c.NotBeforeUnixMs = proposedAtUnixMs + b.delay
	}
	b.oneof.Invoke = c
	b.cmd.Cmd = &b.oneof
	return &b.cmd
}
func completeCmd(c *rpc.Complete) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_Complete{Complete: c}}
}
func cancelCmd(c *rpc.Cancel) *rpc.Command { return &rpc.Command{Cmd: &rpc.Command_Cancel{Cancel: c}} }
func purgeCmd(c *rpc.Purge) *rpc.Command   { return &rpc.Command{Cmd: &rpc.Command_Purge{Purge: c}} }
func attemptFailedCmd(c *rpc.AttemptFailed) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_AttemptFailed{AttemptFailed: c}}
}
func admitCmd(c *rpc.Admit) *rpc.Command { return &rpc.Command{Cmd: &rpc.Command_Admit{Admit: c}} }
