package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// On-disk layout of raft.db. Every group owns one top-level bucket
// "g<id as 4 bytes big-endian>" holding three buckets:
//
//	log    index (8 bytes BE) -> entry (type byte, uvarint term, data)
//	meta   "hard"    -> term, vote, commit (3 x 8 bytes BE)
//	       "conf"    -> marshalled raftpb.ConfState
//	       "snap"    -> index, term of the compaction point (the log holds
//	                    entries after it)
//	       "applied" -> index, term of the last applied entry; written in
//	                    the same transaction as the state it produced
//	state  the StateMachine's bucket
var (
	bucketLog   = []byte("log")
	bucketMeta  = []byte("meta")
	bucketState = []byte("state")

	keyHard    = []byte("hard")
	keyConf    = []byte("conf")
	keySnap    = []byte("snap")
	keyApplied = []byte("applied")
)

// errCorrupt reports bytes in raft.db that cannot be decoded.
var errCorrupt = errors.New("raftlog: corrupt storage")

func groupBucketName(id GroupID) []byte {
	return []byte{'g', byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
}

// groupBuckets are one group's buckets within one transaction.
type groupBuckets struct {
	root, log, meta, state *bolt.Bucket
}

func openGroupBuckets(tx *bolt.Tx, id GroupID) (groupBuckets, error) {
	root := tx.Bucket(groupBucketName(id))
	if root == nil {
		return groupBuckets{}, fmt.Errorf("group %d: %w: no bucket", id, errCorrupt)
	}
	gb := groupBuckets{root: root, log: root.Bucket(bucketLog), meta: root.Bucket(bucketMeta), state: root.Bucket(bucketState)}
	if gb.log == nil || gb.meta == nil || gb.state == nil {
		return groupBuckets{}, fmt.Errorf("group %d: %w: missing sub-bucket", id, errCorrupt)
	}
	// Log keys only grow, so pack pages full instead of splitting in half.
	gb.log.FillPercent = 0.95
	return gb, nil
}

func indexKey(buf []byte, index uint64) []byte {
	return binary.BigEndian.AppendUint64(buf[:0], index)
}

func appendEntryValue(buf []byte, e *pb.Entry) []byte {
	buf = append(buf[:0], byte(e.GetType()))
	buf = binary.AppendUvarint(buf, e.GetTerm())
	return append(buf, e.GetData()...)
}

// decodeEntry copies v (bbolt memory is only valid inside the transaction).
func decodeEntry(index uint64, v []byte) (*pb.Entry, error) {
	if len(v) < 2 {
		return nil, fmt.Errorf("entry %d: %w", index, errCorrupt)
	}
	typ := pb.EntryType(v[0])
	term, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return nil, fmt.Errorf("entry %d term: %w", index, errCorrupt)
	}
	e := &pb.Entry{Index: new(index), Term: new(term)}
	if typ != pb.EntryNormal {
		e.Type = typ.Enum()
	}
	if data := v[1+n:]; len(data) > 0 {
		e.Data = append([]byte(nil), data...)
	}
	return e, nil
}

func decodeTerm(index uint64, v []byte) (uint64, error) {
	if len(v) < 2 {
		return 0, fmt.Errorf("entry %d: %w", index, errCorrupt)
	}
	term, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return 0, fmt.Errorf("entry %d term: %w", index, errCorrupt)
	}
	return term, nil
}

func encodePair(a, b uint64) []byte {
	buf := make([]byte, 16)
	binary.BigEndian.PutUint64(buf, a)
	binary.BigEndian.PutUint64(buf[8:], b)
	return buf
}

func decodePair(v []byte) (uint64, uint64, error) {
	if len(v) != 16 {
		return 0, 0, errCorrupt
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), nil
}

func encodeHardState(hs *pb.HardState) []byte {
	buf := make([]byte, 24)
	binary.BigEndian.PutUint64(buf, hs.GetTerm())
	binary.BigEndian.PutUint64(buf[8:], hs.GetVote())
	binary.BigEndian.PutUint64(buf[16:], hs.GetCommit())
	return buf
}

func decodeHardState(v []byte) (*pb.HardState, error) {
	if len(v) != 24 {
		return nil, fmt.Errorf("hard state: %w", errCorrupt)
	}
	return &pb.HardState{
		Term:   new(binary.BigEndian.Uint64(v)),
		Vote:   new(binary.BigEndian.Uint64(v[8:])),
		Commit: new(binary.BigEndian.Uint64(v[16:])),
	}, nil
}

// persistedGroup is what a group finds on disk when it opens.
type persistedGroup struct {
	hard                  *pb.HardState
	conf                  *pb.ConfState
	snapIndex, snapTerm   uint64
	appliedIdx, appliedTm uint64
	lastIndex             uint64
}

// initialIndex and initialTerm are the compaction point every replica of a
// freshly bootstrapped group starts from: an empty snapshot at index 1,
// term 1 whose ConfState lists the voters. All replicas write the same
// values, so their logs agree and they can elect a leader without
// replicating configuration entries.
const (
	initialIndex = 1
	initialTerm  = 1
)

// ensureGroup creates the group's buckets and its bootstrap state if absent,
// and reads back what is persisted.
func ensureGroup(db *bolt.DB, id GroupID, voters []uint64) (persistedGroup, bool, error) {
	var pg persistedGroup
	created := false
	err := db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(groupBucketName(id)) != nil {
			return nil
		}
		created = true
		root, err := tx.CreateBucket(groupBucketName(id))
		if err != nil {
			return err
		}
		for _, name := range [][]byte{bucketLog, bucketMeta, bucketState} {
			if _, err := root.CreateBucket(name); err != nil {
				return err
			}
		}
		meta := root.Bucket(bucketMeta)
		conf, err := proto.Marshal(&pb.ConfState{Voters: voters})
		if err != nil {
			return err
		}
		hs := &pb.HardState{Term: new(uint64(initialTerm)), Commit: new(uint64(initialIndex))}
		for k, v := range map[string][]byte{
			string(keyConf):    conf,
			string(keySnap):    encodePair(initialIndex, initialTerm),
			string(keyApplied): encodePair(initialIndex, initialTerm),
			string(keyHard):    encodeHardState(hs),
		} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return pg, false, fmt.Errorf("raftlog: create group %d: %w", id, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		gb, err := openGroupBuckets(tx, id)
		if err != nil {
			return err
		}
		if pg.hard, err = decodeHardState(gb.meta.Get(keyHard)); err != nil {
			return err
		}
		pg.conf = &pb.ConfState{}
		if err := proto.Unmarshal(gb.meta.Get(keyConf), pg.conf); err != nil {
			return fmt.Errorf("conf state: %w: %w", errCorrupt, err)
		}
		if pg.snapIndex, pg.snapTerm, err = decodePair(gb.meta.Get(keySnap)); err != nil {
			return fmt.Errorf("snap: %w", err)
		}
		if pg.appliedIdx, pg.appliedTm, err = decodePair(gb.meta.Get(keyApplied)); err != nil {
			return fmt.Errorf("applied: %w", err)
		}
		pg.lastIndex = pg.snapIndex
		if k, _ := gb.log.Cursor().Last(); k != nil {
			pg.lastIndex = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	if err != nil {
		return pg, false, fmt.Errorf("raftlog: read group %d: %w", id, err)
	}
	return pg, created, nil
}
