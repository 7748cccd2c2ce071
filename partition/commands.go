package partition

import (
	"errors"
	"fmt"

	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// BatchVersion is the CommandBatch format this code writes and reads.
const BatchVersion = 1

// ErrUnknownVersion is returned (wrapped) for a log entry written in a batch
// format this code does not know; applying it would diverge from replicas
// that do, so the group stops instead.
var ErrUnknownVersion = errors.New("partition: unknown command batch version")

// deterministic marshalling: every replica must store the same bytes.
var marshalOpts = proto.MarshalOptions{Deterministic: true}

// EncodeBatch marshals commands into one log entry.
func EncodeBatch(cmds ...*rpc.Command) ([]byte, error) {
	data, err := marshalOpts.Marshal(&rpc.CommandBatch{Version: BatchVersion, Commands: cmds})
	if err != nil {
		return nil, fmt.Errorf("partition: encode batch: %w", err)
	}
	return data, nil
}

// DecodeBatch unmarshals one log entry, refusing unknown versions.
func DecodeBatch(data []byte) (*rpc.CommandBatch, error) {
	var b rpc.CommandBatch
	if err := proto.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("partition: decode batch: %w", err)
	}
	if b.Version != BatchVersion {
		return nil, fmt.Errorf("%w: %d", ErrUnknownVersion, b.Version)
	}
	return &b, nil
}

func invokeCmd(c *rpc.Invoke) *rpc.Command { return &rpc.Command{Cmd: &rpc.Command_Invoke{Invoke: c}} }
func completeCmd(c *rpc.Complete) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_Complete{Complete: c}}
}
func cancelCmd(c *rpc.Cancel) *rpc.Command { return &rpc.Command{Cmd: &rpc.Command_Cancel{Cancel: c}} }
func purgeCmd(c *rpc.Purge) *rpc.Command   { return &rpc.Command{Cmd: &rpc.Command_Purge{Purge: c}} }
func attemptFailedCmd(c *rpc.AttemptFailed) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_AttemptFailed{AttemptFailed: c}}
}
