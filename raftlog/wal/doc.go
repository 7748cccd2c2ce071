// Package wal is the write-ahead log of one raftgate node: the Raft logs
// (entries, hard states, first-index points) of all its groups in one
// stream of segment files, written with one write(2) and at most one
// fdatasync per batch (group commit), with an in-memory index per group so
// entries are read back from memory or by offset, never by scanning.
//
// It follows etcd's server/storage/wal (length-prefixed, checksummed
// records; preallocated segments; tail repair) and the multiplexed logs of
// TiKV's raft-engine and dragonboat's tan (one stream for many groups, an
// index per group, recycled segments stamped with a sequence number).
//
// # Files
//
// Options.Dir holds the segments, named by their sequence number in hex,
// "%016x.wal", and files being prepared or kept for recycling, "*.tmp"
// ("%016x.tmp" a new file being prepared as that segment,
// "%016x.recycled.tmp" a retired segment kept for recycling: the two never
// share a name).
// A segment is preallocated to Options.SegmentSize: written with zeros
// (not fallocated: an fdatasync on unwritten extents also commits the
// file system journal, about twice as slow), or a retired segment renamed
// and re-stamped (recycled). The manager goroutine prepares the next
// segment ahead of time, so a cut-over waits only for a rename and a
// directory fsync. Every creation, rename and removal is made durable by
// an fsync of the directory before anything relies on it.
//
// # Format (little endian)
//
// Segment header, 32 bytes:
//
//	0  [8]byte "RGWALSEG"   magic: a file without it is refused
//	8  uint32  version (1)
//	12 uint32  0
//	16 uint64  sequence number of the segment
//	24 uint32  CRC32C of bytes 0..24
//	28 uint32  0
//
// Then frames, each starting on an 8-byte boundary:
//
//	0  uint32  CRC32C (Castagnoli) of bytes 4..24+len
//	4  uint32  len: payload bytes
//	8  uint64  sequence number of the segment (stale bytes of a recycled
//	           file carry an older one and end the log)
//	16 uint64  synced: the offset in this segment up to which the log was
//	           durable when this frame was written
//	24 payload: len bytes of records, then zero padding to 8 bytes (the
//	           padding is not checksummed; it carries nothing)
//
// One Write is one frame (the first Write into a segment is preceded by
// the segment's state frame, in the same write(2)). A payload is a
// sequence of records, each a kind byte and a uint32 group id, then:
//
//	1 entries     uint64 first index, uint64 term of the entry before it,
//	              uint32 count, then per entry: uint64 term, uint8 type,
//	              uint32 data length, data. An entry's index is implied;
//	              a normal entry's Type and empty Data read back as nil.
//	2 hard state  uint64 term, vote, commit
//	3 first index uint64 index, term (SetFirstIndex)
//	4 drop group  nothing
//	5 group state uint64 base, base term, last index, last term, uint8
//	              has-hard-state, uint64 term, vote, commit
//	6 state begin (group field: number of group states that follow)
//	              uint64 sequence number of the previous segment and
//	              uint64 where its frames end
//
// A state frame (kinds 6 then 5 for every live group) starts every
// segment: it restates each group's first-index point, last entry and hard
// state, so no older segment ever holds the only copy of anything still
// needed. It is always fsynced before a Write into the segment returns.
//
// # Batch atomicity
//
// A Batch is one frame with one checksum: after a crash either all of its
// records are recovered or none, and if a batch is lost so is every batch
// written after it. Recovery yields the log as it was after some Write
// that reached the disk, never a mix.
//
// # Recovery (Open)
//
// Open reads every segment once, in sequence order, replaying each frame
// into the index; it stops at the first frame that is not a complete,
// checksummed frame of this segment's sequence number. Then:
//
//   - Segments before a gap in the sequence numbers were retired before a
//     restart that lost the removal; they are removed.
//   - In a segment other than the last, a valid frame after the stopping
//     point, or a stopping point earlier than where the next segment's
//     state frame says the frames end, is corruption: a segment is synced
//     whole before the next one is started, so no torn write can explain
//     it.
//   - In the last segment, a stopping point followed by a valid frame
//     whose synced mark lies beyond it is corruption: those bytes had been
//     durable. Otherwise it is a torn tail. Writes not covered by a
//     completed fdatasync may reach the disk in any order, so the tail is
//     made of the batches whose Write never returned after a sync: nothing
//     in them was acknowledged. They are zeroed (so a shorter record
//     written over them is not followed by their remains), synced and
//     logged at warn with the file, the offset and the bytes dropped.
//   - A damaged last record is indistinguishable from a torn write, and
//     is treated as one: it is dropped only if it is the tail and nothing
//     valid that a sync covered follows it. This is safe in the crash model
//     the log is built for: a power cut loses only writes that no
//     completed fdatasync covered, and nothing in those was acknowledged
//     (Write returns only after the sync). Media damage (bit rot) to the
//     records written since the last sync that a later frame records
//     would be taken for a torn tail too; anywhere else it is caught.
//   - Open fdatasyncs the last segment once: what survived a process
//     crash in the page cache must be durable before anything is written
//     after it.
//   - Corruption refuses Open with a *CorruptError naming the file and the
//     offset and the way out: restore the node from a peer.
//
// After a retired prefix of segments, a group's older entries are gone;
// replay takes the state frame's last index as the group's base, and an
// append at or below it (its predecessors were released or overwritten)
// starts the group's log afresh at that append, using the term it
// carries for the entry before it. Release is not durable: after a restart
// the first index may be lower than before, and the caller releases again
// from its checkpoint.
//
// # Deletion rule
//
// Each segment remembers, per group, the highest live entry index written
// in it (a conflicting append lowers it in every segment to the index
// before the replaced tail; a SetFirstIndex or DropGroup forgets the group
// in all segments: those entries are dead). The oldest segment is retired once every group
// in it is released past that index (or gone), and the segment after it
// has its state frame on disk. Retired segments are recycled (at most two
// kept) or removed, then the directory is fsynced. Only a prefix is ever
// retired.
//
// # Concurrency
//
// Write must be called from one goroutine at a time (the log writer);
// Release and the reads (FirstIndex, LastIndex, Term, Entries, HardState,
// Groups, Stats) are safe concurrently with it and with each other. Write
// takes the index lock only to validate a batch and to publish it after
// the write and sync, never across I/O; Entries reads from disk without the
// lock (a retired segment answers raft.ErrCompacted). Entries returned from
// the tail cache are the caller's own pointers: treat them as immutable.
// Close must not race with Write.
//
// # Errors
//
// A batch that breaks a rule (a gap, an append at or below the first
// index, entries out of order) is refused by Write before anything is
// written. A failed write or fdatasync breaks the WAL: every later Write
// returns the same error, so no hole can follow a lost write.
package wal
