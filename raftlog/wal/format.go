package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The byte layout is described in doc.go; keep the two in step.
const (
	segmentMagic   = "RGWALSEG"
	formatVersion  = 1
	segHeaderSize  = 32
	frameHeaderLen = 24
	frameAlign     = 8

	segmentSuffix = ".wal"
	tmpSuffix     = ".tmp"
)

// Op kinds inside a frame's payload.
const (
	opEntries    byte = 1
	opHardState  byte = 2
	opFirstIndex byte = 3
	opDropGroup  byte = 4
	opGroupState byte = 5
	opStateBegin byte = 6 // group field: the number of groupState ops that follow
)

// Encoded sizes of the fixed parts of ops.
const (
	opHeaderLen      = 1 + 4     // kind, group
	entriesFixedLen  = 8 + 8 + 4 // first index, term of the entry before it, count
	entryFixedLen    = 8 + 1 + 4 // term, type, data length
	hardStateLen     = 3 * 8
	firstIndexLen    = 2 * 8
	groupStateLen    = 4*8 + 1 + hardStateLen
	maxFramePayload  = 1<<32 - 1
	maxEntryDataSize = 1<<32 - 1 - entryFixedLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CorruptError reports a damaged log: a record that fails its checksum (or
// does not parse) where a torn write cannot explain it. The log refuses to
// open; nothing is repaired in place.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: %s is corrupt at offset %d: %s; refusing to start: "+
		"restore this node from a peer (docs/operations.md, \"Backup and restore\")",
		e.File, e.Offset, e.Reason)
}

func segmentName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, segmentSuffix) }

// tmpName names a new file being prepared as segment seq.
func tmpName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, tmpSuffix) }

// recycledName names retired segment seq kept for recycling. It must never
// be a name tmpName gives: a preparation for seq cut short by a crash can
// leave tmpName(seq) behind, to be recycled later, while a segment seq made
// from another recycled file lives on; retiring that segment under the same
// name would replace the leftover, possibly while it is being prepared as
// the next segment, whose records would then go to an unlinked file.
func recycledName(seq uint64) string { return fmt.Sprintf("%016x.recycled%s", seq, tmpSuffix) }

// encodeSegmentHeader fills the 32-byte header of segment seq.
func encodeSegmentHeader(b []byte, seq uint64) {
	clear(b[:segHeaderSize])
	copy(b, segmentMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	binary.LittleEndian.PutUint64(b[16:], seq)
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], castagnoli))
}

// decodeSegmentHeader returns the segment's sequence number, or why the
// header is not one of ours.
func decodeSegmentHeader(b []byte) (uint64, string) {
	if len(b) < segHeaderSize {
		return 0, "shorter than a segment header"
	}
	if string(b[:8]) != segmentMagic {
		return 0, "not a raftgate WAL segment (bad magic)"
	}
	if crc32.Checksum(b[:24], castagnoli) != binary.LittleEndian.Uint32(b[24:]) {
		return 0, "segment header checksum mismatch"
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return 0, fmt.Sprintf("unsupported WAL format version %d (this build reads %d)", v, formatVersion)
	}
	return binary.LittleEndian.Uint64(b[16:]), ""
}

// sealFrame fills the header of the frame in b (header + payload + padding)
// for segment seq, with synced the segment offset known durable.
func sealFrame(b []byte, payloadLen int, seq uint64, synced int64) {
	binary.LittleEndian.PutUint32(b[4:], uint32(payloadLen))
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(synced))
	crc := crc32.Checksum(b[4:frameHeaderLen+payloadLen], castagnoli)
	binary.LittleEndian.PutUint32(b[0:], crc)
}

// frameSize is the bytes a frame with payloadLen bytes of payload takes.
func frameSize(payloadLen int) int {
	return (frameHeaderLen + payloadLen + frameAlign - 1) &^ (frameAlign - 1)
}

// padFrame appends zero padding so the frame ends on frameAlign.
func padFrame(b []byte, frameStart int) []byte {
	for (len(b)-frameStart)%frameAlign != 0 {
		b = append(b, 0)
	}
	return b
}

// frame is a frame header as read back.
type frame struct {
	crc        uint32
	payloadLen int
	seq        uint64
	synced     int64
}

func readFrameHeader(b []byte) frame {
	return frame{
		crc:        binary.LittleEndian.Uint32(b[0:]),
		payloadLen: int(binary.LittleEndian.Uint32(b[4:])),
		seq:        binary.LittleEndian.Uint64(b[8:]),
		synced:     int64(binary.LittleEndian.Uint64(b[16:])),
	}
}

// validFrameAt reports whether a complete frame of segment seq with a good
// checksum starts at off in data, and returns it.
func validFrameAt(data []byte, off int, seq uint64) (frame, bool) {
	if off+frameHeaderLen > len(data) {
		return frame{}, false
	}
	f := readFrameHeader(data[off:])
	// The padding carries nothing and is not checked (it may even be cut
	// off by the end of the file).
	if f.seq != seq || f.payloadLen == 0 || off+frameHeaderLen+f.payloadLen > len(data) {
		return f, false
	}
	crc := crc32.Checksum(data[off+4:off+frameHeaderLen+f.payloadLen], castagnoli)
	return f, crc == f.crc
}

// validWithSeq reports whether the frame at off would be valid if its
// sequence field read seq: a frame of ours with a damaged sequence field.
func validWithSeq(data []byte, off int, seq uint64) bool {
	if off+frameHeaderLen > len(data) {
		return false
	}
	f := readFrameHeader(data[off:])
	if f.payloadLen == 0 || off+frameHeaderLen+f.payloadLen > len(data) {
		return false
	}
	var hdr [frameHeaderLen - 4]byte
	copy(hdr[:], data[off+4:off+frameHeaderLen])
	binary.LittleEndian.PutUint64(hdr[4:], seq)
	crc := crc32.Update(crc32.Checksum(hdr[:], castagnoli), castagnoli, data[off+frameHeaderLen:off+frameHeaderLen+f.payloadLen])
	return crc == f.crc
}
