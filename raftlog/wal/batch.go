package wal

import (
	"encoding/binary"
	"fmt"

	raftpb "go.etcd.io/raft/v3/raftpb"
)

// Batch collects the records of one Write, for any number of groups. The
// records are encoded as they are added, into a buffer the Batch reuses
// after Reset, so a steady stream of batches allocates next to nothing. A
// Batch keeps the entry pointers it was given (the log's tail cache holds
// them after Write); the entries must not be modified afterwards, as with
// raft.Storage. The zero Batch is ready to use; it is not safe for
// concurrent use.
type Batch struct {
	// buf is the frame: header room, then the encoded ops.
	buf []byte
	ops []batchOp
	// entryOffs holds, for each appended entry in order, the offset of its
	// encoding in buf.
	entryOffs []uint32
	err       error
}

// batchOp is one record of a batch, kept for the in-memory index.
type batchOp struct {
	kind  byte
	group uint32
	// opEntries: a = first index; opHardState: a, b, c = term, vote,
	// commit; opFirstIndex: a, b = index, term.
	a, b, c uint64
	ents    []*raftpb.Entry
	// firstEntry is the position of ents[0] in entryOffs; prevTermAt is
	// where in buf the term of entry a-1 goes, which Write fills in.
	firstEntry, prevTermAt int
	// prevSame is the previous op of the same group in the batch (-1:
	// none), set by Write.
	prevSame int
}

// Reset empties the batch, keeping its buffers.
func (b *Batch) Reset() {
	b.buf = b.buf[:0]
	clear(b.ops) // drop the entry pointers
	b.ops = b.ops[:0]
	b.entryOffs = b.entryOffs[:0]
	b.err = nil
}

// Empty reports whether the batch holds no record.
func (b *Batch) Empty() bool { return len(b.ops) == 0 && b.err == nil }

func (b *Batch) start(kind byte, g uint32) {
	if len(b.buf) == 0 {
		if cap(b.buf) < 4096 {
			b.buf = make([]byte, 0, 4096)
		}
		b.buf = append(b.buf, make([]byte, frameHeaderLen)...)
	}
	b.buf = append(b.buf, kind)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, g)
}

// Append adds contiguous entries of group g. If the first entry's index is
// <= the group's last index, the group's log from that index on is
// replaced (raft's conflicting-tail rule). A gap (first index > last+1) or
// an index at or below the group's compaction point is an error from
// Write.
func (b *Batch) Append(g uint32, ents []*raftpb.Entry) {
	if len(ents) == 0 || b.err != nil {
		return
	}
	first := ents[0].GetIndex()
	for i, e := range ents {
		if e.GetIndex() != first+uint64(i) {
			b.err = fmt.Errorf("wal: group %d: entries not contiguous: index %d after %d", g, e.GetIndex(), first+uint64(i)-1)
			return
		}
		if len(e.GetData()) > maxEntryDataSize {
			b.err = fmt.Errorf("wal: group %d: entry %d too large (%d bytes)", g, e.GetIndex(), len(e.GetData()))
			return
		}
	}
	b.start(opEntries, g)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, first)
	prevTermAt := len(b.buf)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, 0) // filled in by Write
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(ents)))
	b.ops = append(b.ops, batchOp{kind: opEntries, group: g, a: first, ents: ents, firstEntry: len(b.entryOffs), prevTermAt: prevTermAt})
	for _, e := range ents {
		b.entryOffs = append(b.entryOffs, uint32(len(b.buf)))
		b.buf = appendEntry(b.buf, e)
	}
}

func appendEntry(buf []byte, e *raftpb.Entry) []byte {
	buf = binary.LittleEndian.AppendUint64(buf, e.GetTerm())
	buf = append(buf, byte(e.GetType()))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(e.GetData())))
	return append(buf, e.GetData()...)
}

// SetHardState records group g's latest HardState.
func (b *Batch) SetHardState(g uint32, hs *raftpb.HardState) {
	if b.err != nil {
		return
	}
	b.start(opHardState, g)
	b.buf = appendHardState(b.buf, hs.GetTerm(), hs.GetVote(), hs.GetCommit())
	b.ops = append(b.ops, batchOp{kind: opHardState, group: g, a: hs.GetTerm(), b: hs.GetVote(), c: hs.GetCommit()})
}

func appendHardState(buf []byte, term, vote, commit uint64) []byte {
	buf = binary.LittleEndian.AppendUint64(buf, term)
	buf = binary.LittleEndian.AppendUint64(buf, vote)
	return binary.LittleEndian.AppendUint64(buf, commit)
}

// SetFirstIndex resets group g's log to begin after (index, term): used
// when a snapshot is installed. The log becomes empty with FirstIndex =
// index+1, LastIndex = index, and Term(index) answers term.
func (b *Batch) SetFirstIndex(g uint32, index, term uint64) {
	if b.err != nil {
		return
	}
	b.start(opFirstIndex, g)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, index)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, term)
	b.ops = append(b.ops, batchOp{kind: opFirstIndex, group: g, a: index, b: term})
}

// DropGroup removes group g entirely (a replica removed). Records of g
// added later in the same batch start it afresh.
func (b *Batch) DropGroup(g uint32) {
	if b.err != nil {
		return
	}
	b.start(opDropGroup, g)
	b.ops = append(b.ops, batchOp{kind: opDropGroup, group: g})
}
