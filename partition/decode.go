package partition

import (
	"unicode/utf8"

	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// decodeBatch is rpc.DecodeBatch (same result, same errors) with fewer
// allocations for the entries a send makes: batches of Invoke and Complete
// commands (the proposer loop puts the ingress's Invokes and the invoker's
// Completes in the same entries). proto.Unmarshal allocates each message
// and each bytes field on its own, about ten allocations per Invoke and
// six per Complete on every replica; here a batch takes six plus its
// strings. Anything else (another command, headers, an unknown field,
// malformed input) goes to rpc.DecodeBatch.
//
// The decoded bytes fields share one copy of their bytes (cap-limited, so
// an append never reaches a neighbour); nothing aliases data.
func decodeBatch(data []byte) (*rpc.CommandBatch, error) {
	if b, ok := decodeSendBatch(data); ok {
		return b, nil
	}
	return rpc.DecodeBatch(data)
}

// Field numbers (rpc/raftgate.proto).
const (
	batchVersion    = 1
	batchCommands   = 2
	commandInvoke   = 10
	commandComplete = 11

	invokeInvocationID   = 1
	invokeRequestID      = 2
	invokeService        = 3
	invokeHandler        = 4
	invokeBody           = 5
	invokeContentType    = 6
	invokeIdempotencyKey = 8
	invokeProposerTerm   = 9
	invokeProposedAt     = 10
	invokeNotBefore      = 11
	invokeKey            = 12
	invokeExclusive      = 13
	invokeRegisteredAt   = 14 // service_registered_index

	completeInvocationID = 1
	completeResult       = 2
	completeProposerTerm = 3
	completeProposedAt   = 4

	resultStatus      = 1
	resultBody        = 2
	resultContentType = 3
	resultFailed      = 4
	resultError       = 5
	resultAttempts    = 6
)

// completeBox holds a Complete, its Result and its Command in one
// allocation.
type completeBox struct {
	c     rpc.Complete
	res   rpc.Result
	oneof rpc.Command_Complete
	cmd   rpc.Command
}

// decodeSendBatch decodes data if it is a batch of the current version
// whose commands are all Invokes and Completes of the fields it knows;
// false means rpc.DecodeBatch must decide.
func decodeSendBatch(data []byte) (*rpc.CommandBatch, bool) {
	var version uint64
	invokes, completes := 0, 0
	for rest := data; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, false
		}
		rest = rest[n:]
		switch {
		case num == batchVersion && typ == protowire.VarintType:
			version, n = protowire.ConsumeVarint(rest)
		case num == batchCommands && typ == protowire.BytesType:
			var cmd []byte
			cmd, n = protowire.ConsumeBytes(rest)
			switch kind, _, ok := commandOf(cmd); {
			case !ok:
				return nil, false
			case kind == commandInvoke:
				invokes++
			default:
				completes++
			}
		default:
			return nil, false
		}
		if n < 0 {
			return nil, false
		}
		rest = rest[n:]
	}
	if uint32(version) != rpc.BatchVersion || invokes+completes == 0 {
		return nil, false
	}
	batch := &rpc.CommandBatch{Version: uint32(version), Commands: make([]*rpc.Command, 0, invokes+completes)}
	invokeBoxes := make([]invokeBox, invokes)
	completeBoxes := make([]completeBox, completes)
	buf := make([]byte, 0, len(data)) // every bytes field, copied once
	for rest := data; len(rest) > 0; {
		num, _, n := protowire.ConsumeTag(rest)
		rest = rest[n:] // the loop above checked every tag and length
		if num == batchVersion {
			_, n = protowire.ConsumeVarint(rest)
			rest = rest[n:]
			continue
		}
		cmd, n := protowire.ConsumeBytes(rest)
		rest = rest[n:]
		kind, body, _ := commandOf(cmd)
		var ok bool
		if kind == commandInvoke {
			box := &invokeBoxes[0]
			invokeBoxes = invokeBoxes[1:]
			if buf, ok = decodeInvoke(body, &box.inv, buf); !ok {
				return nil, false
			}
			box.oneof.Invoke = &box.inv
			box.cmd.Cmd = &box.oneof
			batch.Commands = append(batch.Commands, &box.cmd)
			continue
		}
		box := &completeBoxes[0]
		completeBoxes = completeBoxes[1:]
		if buf, ok = decodeComplete(body, box, buf); !ok {
			return nil, false
		}
		box.oneof.Complete = &box.c
		box.cmd.Cmd = &box.oneof
		batch.Commands = append(batch.Commands, &box.cmd)
	}
	return batch, true
}

// commandOf returns the kind (commandInvoke or commandComplete) and the
// message inside an encoded Command that holds only one of those.
func commandOf(cmd []byte) (protowire.Number, []byte, bool) {
	num, typ, n := protowire.ConsumeTag(cmd)
	if n < 0 || num != commandInvoke && num != commandComplete || typ != protowire.BytesType {
		return 0, nil, false
	}
	msg, m := protowire.ConsumeBytes(cmd[n:])
	if m < 0 || n+m != len(cmd) {
		return 0, nil, false // malformed, or more fields (proto would merge them)
	}
	return num, msg, true
}

// appendField copies v to the end of buf and returns the copy, cap-limited
// (nil for an empty v: proto3 decodes an empty bytes field as nil).
func appendField(buf, v []byte) ([]byte, []byte) {
	if len(v) == 0 {
		return buf, nil
	}
	start := len(buf)
	buf = append(buf, v...)
	return buf, buf[start:len(buf):len(buf)]
}

// decodeComplete decodes data into box.c (and its result into box.res),
// copying its bytes fields to the end of buf; false for anything
// decodeSendBatch leaves to proto.
func decodeComplete(data []byte, box *completeBox, buf []byte) ([]byte, bool) {
	c := &box.c
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return buf, false
		}
		data = data[n:]
		switch {
		case typ == protowire.BytesType && (num == completeInvocationID || num == completeResult):
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return buf, false
			}
			data = data[n:]
			if num == completeInvocationID {
				buf, c.InvocationId = appendField(buf, v)
				continue
			}
			if c.Result != nil {
				return buf, false // a repeated message field: proto merges them
			}
			var ok bool
			if buf, ok = decodeResult(v, &box.res, buf); !ok {
				return buf, false
			}
			c.Result = &box.res
		case typ == protowire.VarintType && (num == completeProposerTerm || num == completeProposedAt):
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return buf, false
			}
			data = data[n:]
			if num == completeProposerTerm {
				c.ProposerTerm = v
			} else {
				c.ProposedAtUnixMs = int64(v)
			}
		default:
			return buf, false
		}
	}
	return buf, true
}

// decodeResult decodes data into res, copying its body to the end of buf.
func decodeResult(data []byte, res *rpc.Result, buf []byte) ([]byte, bool) {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return buf, false
		}
		data = data[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return buf, false
			}
			data = data[n:]
			switch num {
			case resultBody:
				buf, res.Body = appendField(buf, v)
			case resultContentType, resultError:
				if !utf8.Valid(v) {
					return buf, false // proto refuses it
				}
				if num == resultContentType {
					res.ContentType = string(v)
				} else {
					res.Error = string(v)
				}
			default:
				return buf, false
			}
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return buf, false
			}
			data = data[n:]
			switch num {
			case resultStatus:
				res.Status = uint32(v)
			case resultFailed:
				res.Failed = protowire.DecodeBool(v)
			case resultAttempts:
				res.Attempts = uint32(v)
			default:
				return buf, false
			}
		default:
			return buf, false
		}
	}
	return buf, true
}

// decodeInvoke decodes data into inv, copying its bytes fields to the end
// of buf; false for anything decodeSendBatch leaves to proto.
func decodeInvoke(data []byte, inv *rpc.Invoke, buf []byte) ([]byte, bool) {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return buf, false
		}
		data = data[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return buf, false
			}
			data = data[n:]
			switch num {
			case invokeInvocationID:
				buf, inv.InvocationId = appendField(buf, v)
			case invokeRequestID:
				buf, inv.RequestId = appendField(buf, v)
			case invokeBody:
				buf, inv.Body = appendField(buf, v)
			case invokeService, invokeHandler, invokeContentType, invokeIdempotencyKey, invokeKey:
				if !utf8.Valid(v) {
					return buf, false // proto refuses it
				}
				s := string(v)
				switch num {
				case invokeService:
					inv.Service = s
				case invokeHandler:
					inv.Handler = s
				case invokeContentType:
					inv.ContentType = s
				case invokeIdempotencyKey:
					inv.IdempotencyKey = s
				default:
					inv.Key = s
				}
			default:
				return buf, false // headers, or a field this code does not know
			}
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return buf, false
			}
			data = data[n:]
			switch num {
			case invokeProposerTerm:
				inv.ProposerTerm = v
			case invokeProposedAt:
				inv.ProposedAtUnixMs = int64(v)
			case invokeNotBefore:
				inv.NotBeforeUnixMs = int64(v)
			case invokeExclusive:
				inv.Exclusive = protowire.DecodeBool(v)
			case invokeRegisteredAt:
				inv.ServiceRegisteredIndex = v
			default:
				return buf, false
			}
		default:
			return buf, false
		}
	}
	return buf, true
}
