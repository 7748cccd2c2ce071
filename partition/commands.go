package partition

import (
	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// deterministic marshalling: every replica must store the same bytes.
var marshalOpts = proto.MarshalOptions{Deterministic: true}

func invokeCmd(c *rpc.Invoke) *rpc.Command { return &rpc.Command{Cmd: &rpc.Command_Invoke{Invoke: c}} }
func completeCmd(c *rpc.Complete) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_Complete{Complete: c}}
}
func cancelCmd(c *rpc.Cancel) *rpc.Command { return &rpc.Command{Cmd: &rpc.Command_Cancel{Cancel: c}} }
func purgeCmd(c *rpc.Purge) *rpc.Command   { return &rpc.Command{Cmd: &rpc.Command_Purge{Purge: c}} }
func attemptFailedCmd(c *rpc.AttemptFailed) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_AttemptFailed{AttemptFailed: c}}
}
func admitCmd(c *rpc.Admit) *rpc.Command { return &rpc.Command{Cmd: &rpc.Command_Admit{Admit: c}} }
