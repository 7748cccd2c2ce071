package raftlog

import (
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// decodeMessage decodes a raft message received from a peer, with the
// result proto.Unmarshal gives. raftpb's fields are proto2 pointers, one
// allocation each, and a MsgApp carries several per entry: decoding a busy
// node's inbound traffic was a quarter of its allocations. The common
// shape (scalars, context, entries) is decoded here into three
// allocations; anything else (a snapshot, responses, an unknown field or
// enum value, malformed input) goes to proto.Unmarshal.
//
// Entries' Data and the Context alias data (cap-limited), so the caller
// must not modify or reuse data afterwards. raftpb.Message is etcd raft's
// generated type, so no generator of ours can add a faster decoder to it
// (BenchmarkDecodeMessage, docs/benchmarks.md).
func decodeMessage(data []byte) (*pb.Message, error) {
	if m, ok := decodeMessageFast(data); ok {
		return m, nil
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, err
	}
	return m, nil
}

// messageBox holds a message and the values its pointer fields point to,
// so that they take one allocation.
type messageBox struct {
	msg                                                      pb.Message
	typ                                                      pb.MessageType
	to, from, term, logTerm, index, commit, vote, rejectHint uint64
	reject                                                   bool
}

// entryBox is the same for an entry.
type entryBox struct {
	entry       pb.Entry
	typ         pb.EntryType
	term, index uint64
}

// Field numbers of raftpb.Message and raftpb.Entry (raft.proto).
const (
	msgType       = 1
	msgTo         = 2
	msgFrom       = 3
	msgTerm       = 4
	msgLogTerm    = 5
	msgIndex      = 6
	msgEntries    = 7
	msgCommit     = 8
	msgReject     = 10
	msgRejectHint = 11
	msgContext    = 12
	msgVote       = 13

	entryType  = 1
	entryTerm  = 2
	entryIndex = 3
	entryData  = 4
)

// decodeMessageFast decodes data if it has only the fields it knows; false
// means proto.Unmarshal must decide.
func decodeMessageFast(data []byte) (*pb.Message, bool) {
	entries, ok := countEntries(data)
	if !ok {
		return nil, false
	}
	box := &messageBox{}
	m := &box.msg
	var boxes []entryBox
	if entries > 0 {
		boxes = make([]entryBox, entries)
		m.Entries = make([]*pb.Entry, 0, entries)
	}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		data = data[n:] // countEntries checked every tag and length
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(data)
			data = data[n:]
			v = v[:len(v):len(v)]
			if num == msgContext {
				m.Context = v
				continue
			}
			e := &boxes[len(m.Entries)]
			if !decodeEntry(v, e) {
				return nil, false
			}
			m.Entries = append(m.Entries, &e.entry)
			continue
		}
		v, n := protowire.ConsumeVarint(data)
		data = data[n:]
		switch num {
		case msgType:
			if _, known := pb.MessageType_name[int32(v)]; !known {
				return nil, false // proto2 keeps an unknown value as an unknown field
			}
			box.typ, m.Type = pb.MessageType(int32(v)), &box.typ
		case msgTo:
			box.to, m.To = v, &box.to
		case msgFrom:
			box.from, m.From = v, &box.from
		case msgTerm:
			box.term, m.Term = v, &box.term
		case msgLogTerm:
			box.logTerm, m.LogTerm = v, &box.logTerm
		case msgIndex:
			box.index, m.Index = v, &box.index
		case msgCommit:
			box.commit, m.Commit = v, &box.commit
		case msgReject:
			box.reject, m.Reject = protowire.DecodeBool(v), &box.reject
		case msgRejectHint:
			box.rejectHint, m.RejectHint = v, &box.rejectHint
		case msgVote:
			box.vote, m.Vote = v, &box.vote
		}
	}
	return m, true
}

// countEntries checks that every field of a message is one decodeMessageFast
// knows, with its wire type and a valid encoding, and counts the entries.
func countEntries(data []byte) (int, bool) {
	entries := 0
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, false
		}
		data = data[n:]
		switch {
		case typ == protowire.VarintType && isMessageVarint(num):
			n = protowire.ConsumeFieldValue(num, typ, data)
		case typ == protowire.BytesType && (num == msgEntries || num == msgContext):
			n = protowire.ConsumeFieldValue(num, typ, data)
			if num == msgEntries {
				entries++
			}
		default:
			return 0, false
		}
		if n < 0 {
			return 0, false
		}
		data = data[n:]
	}
	return entries, true
}

func isMessageVarint(num protowire.Number) bool {
	switch num {
	case msgType, msgTo, msgFrom, msgTerm, msgLogTerm, msgIndex, msgCommit, msgReject, msgRejectHint, msgVote:
		return true
	}
	return false
}

// decodeEntry decodes one entry into e; false for anything it does not
// know (an unknown field, wire type or enum value, malformed input).
func decodeEntry(data []byte, e *entryBox) bool {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false
		}
		data = data[n:]
		switch {
		case typ == protowire.BytesType && num == entryData:
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return false
			}
			data = data[n:]
			e.entry.Data = v[:len(v):len(v)]
		case typ == protowire.VarintType && (num == entryType || num == entryTerm || num == entryIndex):
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return false
			}
			data = data[n:]
			switch num {
			case entryType:
				if _, known := pb.EntryType_name[int32(v)]; !known {
					return false
				}
				e.typ, e.entry.Type = pb.EntryType(int32(v)), &e.typ
			case entryTerm:
				e.term, e.entry.Term = v, &e.term
			case entryIndex:
				e.index, e.entry.Index = v, &e.index
			}
		default:
			return false
		}
	}
	return true
}
