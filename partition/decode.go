package partition

import (
	"unicode/utf8"

	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// decodeBatch is rpc.DecodeBatch (same result, same errors) with fewer
// allocations for the entry every accepted invocation makes: a batch of
// Invoke commands. proto.Unmarshal allocates each message and each bytes
// field on its own, about ten allocations per Invoke on every replica;
// here a batch takes four plus its strings. Anything else (another
// command, headers, an unknown field, malformed input) goes to
// rpc.DecodeBatch.
//
// The decoded bytes fields share one copy of their bytes (cap-limited, so
// an append never reaches a neighbour); nothing aliases data.
func decodeBatch(data []byte) (*rpc.CommandBatch, error) {
	if b, ok := decodeInvokeBatch(data); ok {
		return b, nil
	}
	return rpc.DecodeBatch(data)
}

// Field numbers (rpc/raftgate.proto).
const (
	batchVersion  = 1
	batchCommands = 2
	commandInvoke = 10

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
)

// decodeInvokeBatch decodes data if it is a batch of the current version
// whose commands are all Invokes of the fields it knows; false means
// rpc.DecodeBatch must decide.
func decodeInvokeBatch(data []byte) (*rpc.CommandBatch, bool) {
	var version uint64
	invokes := 0
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
			if _, ok := invokeOf(cmd); !ok {
				return nil, false
			}
			invokes++
		default:
			return nil, false
		}
		if n < 0 {
			return nil, false
		}
		rest = rest[n:]
	}
	if uint32(version) != rpc.BatchVersion || invokes == 0 {
		return nil, false
	}
	batch := &rpc.CommandBatch{Version: uint32(version), Commands: make([]*rpc.Command, 0, invokes)}
	boxes := make([]invokeBox, invokes)
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
		inv, _ := invokeOf(cmd)
		box := &boxes[len(batch.Commands)]
		var ok bool
		if buf, ok = decodeInvoke(inv, &box.inv, buf); !ok {
			return nil, false
		}
		box.oneof.Invoke = &box.inv
		box.cmd.Cmd = &box.oneof
		batch.Commands = append(batch.Commands, &box.cmd)
	}
	return batch, true
}

// invokeOf returns the Invoke inside an encoded Command that holds only
// one.
func invokeOf(cmd []byte) ([]byte, bool) {
	num, typ, n := protowire.ConsumeTag(cmd)
	if n < 0 || num != commandInvoke || typ != protowire.BytesType {
		return nil, false
	}
	inv, m := protowire.ConsumeBytes(cmd[n:])
	if m < 0 || n+m != len(cmd) {
		return nil, false // malformed, or more fields (proto would merge them)
	}
	return inv, true
}

// decodeInvoke decodes data into inv, copying its bytes fields to the end
// of buf; false for anything decodeInvokeBatch leaves to proto.
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
			case invokeInvocationID, invokeRequestID, invokeBody:
				var field []byte
				if len(v) > 0 { // proto3: an empty bytes field decodes as nil
					start := len(buf)
					buf = append(buf, v...)
					field = buf[start:len(buf):len(buf)]
				}
				switch num {
				case invokeInvocationID:
					inv.InvocationId = field
				case invokeRequestID:
					inv.RequestId = field
				default:
					inv.Body = field
				}
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
