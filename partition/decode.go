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
// an append never reaches a neighbour); nothing aliases data. Generated
// decoders (vtprotobuf) allocate per message as proto.Unmarshal does:
// BenchmarkDecodeBatch, docs/benchmarks.md.
func decodeBatch(data []byte) (*rpc.CommandBatch, error) {
	if b, ok := decodeSendBatch(data); ok {
		return b, nil
	}
	return rpc.DecodeBatch(data)
}

// Field numbers (rpc/durable.proto).
const (
	batchVersion    = 1
	batchCommands   = 2
	commandInvoke   = 10
	commandComplete = 11

	invokeInvocationID    = 1
	invokeRequestID       = 2
	invokeService         = 3
	invokeHandler         = 4
	invokeBody            = 5
	invokeContentType     = 6
	invokeIdempotencyKey  = 8
	invokeProposerTerm    = 9
	invokeProposedAt      = 10
	invokeNotBefore       = 11
	invokeKey             = 12
	invokeExclusive       = 13
	invokeRegisteredAt    = 14 // service_registered_index
	invokeDelay           = 15
	invokeRejectReusedKey = 40
	invokeBodyDigest      = 41
	invokeScheduleID      = 60
	invokeScheduledAt     = 61
	invokeCallbackURL     = 80
	invokeScope           = 90
	invokePriority        = 91

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
			if buf, ok = decodeInvoke(body, box, buf); !ok {
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

// field is one field of an encoded message, as nextField reads it: a
// bytes value or a varint.
type field struct {
	num    protowire.Number
	typ    protowire.Type
	bytes  []byte
	varint uint64
}

func (f field) is(typ protowire.Type, nums ...protowire.Number) bool {
	if f.typ != typ {
		return false
	}
	for _, n := range nums {
		if f.num == n {
			return true
		}
	}
	return false
}

// nextField reads the field at the start of data and returns it with the
// rest of data; false for a malformed field or one of another wire type.
func nextField(data []byte) (field, []byte, bool) {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 {
		return field{}, nil, false
	}
	data = data[n:]
	f := field{num: num, typ: typ}
	switch typ {
	case protowire.BytesType:
		f.bytes, n = protowire.ConsumeBytes(data)
	case protowire.VarintType:
		f.varint, n = protowire.ConsumeVarint(data)
	default:
		return field{}, nil, false
	}
	if n < 0 {
		return field{}, nil, false
	}
	return f, data[n:], true
}

// decodeComplete decodes data into box.c (and its result into box.res),
// copying its bytes fields to the end of buf; false for anything
// decodeSendBatch leaves to proto.
func decodeComplete(data []byte, box *completeBox, buf []byte) ([]byte, bool) {
	c := &box.c
	for len(data) > 0 {
		f, rest, ok := nextField(data)
		if !ok {
			return buf, false
		}
		data = rest
		switch {
		case f.is(protowire.BytesType, completeInvocationID):
			buf, c.InvocationId = appendField(buf, f.bytes)
		case f.is(protowire.BytesType, completeResult):
			if c.Result != nil {
				return buf, false // a repeated message field: proto merges them
			}
			if buf, ok = decodeResult(f.bytes, &box.res, buf); !ok {
				return buf, false
			}
			c.Result = &box.res
		case f.is(protowire.VarintType, completeProposerTerm):
			c.ProposerTerm = f.varint
		case f.is(protowire.VarintType, completeProposedAt):
			c.ProposedAtUnixMs = int64(f.varint)
		default:
			return buf, false
		}
	}
	return buf, true
}

// decodeResult decodes data into res, copying its body to the end of buf.
func decodeResult(data []byte, res *rpc.Result, buf []byte) ([]byte, bool) {
	for len(data) > 0 {
		f, rest, ok := nextField(data)
		if !ok {
			return buf, false
		}
		data = rest
		switch {
		case f.is(protowire.BytesType, resultBody):
			buf, res.Body = appendField(buf, f.bytes)
		case f.is(protowire.BytesType, resultContentType, resultError):
			if !utf8.Valid(f.bytes) {
				return buf, false // proto refuses it
			}
			if f.num == resultContentType {
				res.ContentType = string(f.bytes)
			} else {
				res.Error = string(f.bytes)
			}
		case f.is(protowire.VarintType, resultStatus):
			res.Status = uint32(f.varint)
		case f.is(protowire.VarintType, resultFailed):
			res.Failed = protowire.DecodeBool(f.varint)
		case f.is(protowire.VarintType, resultAttempts):
			res.Attempts = uint32(f.varint)
		default:
			return buf, false
		}
	}
	return buf, true
}

// decodeInvoke decodes data into box.inv (its delay into box.delay),
// copying its bytes fields to the end of buf; false for anything
// decodeSendBatch leaves to proto (headers, or a field this code does not
// know).
func decodeInvoke(data []byte, box *invokeBox, buf []byte) ([]byte, bool) {
	inv := &box.inv
	for len(data) > 0 {
		f, rest, ok := nextField(data)
		if !ok {
			return buf, false
		}
		data = rest
		switch {
		case f.is(protowire.BytesType, invokeInvocationID):
			buf, inv.InvocationId = appendField(buf, f.bytes)
		case f.is(protowire.BytesType, invokeRequestID):
			buf, inv.RequestId = appendField(buf, f.bytes)
		case f.is(protowire.BytesType, invokeBody):
			buf, inv.Body = appendField(buf, f.bytes)
		case f.is(protowire.BytesType, invokeBodyDigest):
			buf, inv.BodyDigest = appendField(buf, f.bytes)
		case f.is(protowire.VarintType, invokeRejectReusedKey):
			inv.RejectReusedKey = protowire.DecodeBool(f.varint)
		case f.is(protowire.BytesType, invokeService, invokeHandler, invokeContentType, invokeIdempotencyKey, invokeKey,
			invokeScheduleID, invokeCallbackURL, invokeScope):
			if !utf8.Valid(f.bytes) {
				return buf, false // proto refuses it
			}
			*invokeString(inv, f.num) = string(f.bytes)
		case f.is(protowire.VarintType, invokeProposerTerm):
			inv.ProposerTerm = f.varint
		case f.is(protowire.VarintType, invokeProposedAt):
			inv.ProposedAtUnixMs = int64(f.varint)
		case f.is(protowire.VarintType, invokeNotBefore):
			inv.NotBeforeUnixMs = int64(f.varint)
		case f.is(protowire.VarintType, invokeExclusive):
			inv.Exclusive = protowire.DecodeBool(f.varint)
		case f.is(protowire.VarintType, invokeRegisteredAt):
			inv.ServiceRegisteredIndex = f.varint
		case f.is(protowire.VarintType, invokeScheduledAt):
			inv.ScheduledAtUnixMs = int64(f.varint)
		case f.is(protowire.VarintType, invokePriority):
			inv.Priority = int32(f.varint)
		case f.is(protowire.VarintType, invokeDelay):
			box.delay = int64(f.varint)
			inv.DelayMs = &box.delay
		default:
			return buf, false
		}
	}
	return buf, true
}

// invokeString is the string field of inv with number num.
func invokeString(inv *rpc.Invoke, num protowire.Number) *string {
	switch num {
	case invokeService:
		return &inv.Service
	case invokeHandler:
		return &inv.Handler
	case invokeContentType:
		return &inv.ContentType
	case invokeIdempotencyKey:
		return &inv.IdempotencyKey
	case invokeScheduleID:
		return &inv.ScheduleId
	case invokeCallbackURL:
		return &inv.CallbackUrl
	case invokeScope:
		return &inv.Scope
	default:
		return &inv.Key
	}
}
