package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// On-disk layout of a data dir (formats 2 and 3):
//
//	DataDir/wal/      the write-ahead log of every group's Raft log and hard
//	                  state (package raftlog/wal)
//	DataDir/state.db  bbolt: state machines only, checkpointed
//	DataDir/snapshots incoming snapshots being spooled (garbage at start)
//	DataDir/LOCK      flock held while a Node has the dir open (dirlock.go)
//
// Directories are 0700 and files 0600.
//
// state.db holds a bucket "node" with "format" (8 bytes BE: formatVersion
// when created, formatMembership once RaiseFormat ran),
// the pins (Pin) and "removed" (a tombstone per group whose RemoveGroup
// has not finished, keyed by id as 4 bytes big-endian), and per group a
// top-level bucket
// "g<id as 4 bytes big-endian>" holding:
//
//	meta   "conf"    -> marshalled raftpb.ConfState; a configuration change
//	                    rewrites it in the same transaction as "applied"
//	       "applied" -> index, term of the last applied entry; written in
//	                    the same transaction as the state it produced
//	       "replica" -> this node's replica id in the group (8 bytes BE);
//	                    absent for generation 0 (the node id)
//	state  the StateMachine's bucket
//
// Format 1 (the first release) kept the Raft log in raft.db beside the
// state; migrate.go turns it into format 2. Format 3 is format 2 that has
// seen a cluster membership change (RaiseFormat): the same layout, but
// its groups' configurations and the cluster record need a release that
// knows membership, so a release that reads only format 2 refuses it.
var (
	bucketNode  = []byte("node")
	bucketPins  = []byte("pins")
	bucketMeta  = []byte("meta")
	bucketState = []byte("state")
	// bucketStaging holds, under a group's root, an incoming snapshot's
	// state (as its bucket "state") while it is loaded in steps; the
	// install's last step moves it in place of the group's state. One left
	// by a crash is dropped at the group's next open or install.
	bucketStaging = []byte("staging")

	keyFormat  = []byte("format")
	keyConf    = []byte("conf")
	keyApplied = []byte("applied")
	keyReplica = []byte("replica")
)

// StateFile is the name of the state file in a node's data dir: what a
// backup copies and a restore puts in place.
const StateFile = stateFile

const (
	stateFile     = "state.db"
	walDirName    = "wal"
	formatVersion = 2
	// formatMembership is the format RaiseFormat sets.
	formatMembership = 3
)

// readableFormats are the formats this release opens.
var readableFormats = []uint64{formatVersion, formatMembership}

// errCorrupt reports bytes in state.db that cannot be decoded.
var errCorrupt = errors.New("raftlog: corrupt storage")

func groupBucketName(id GroupID) []byte {
	return []byte{'g', byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
}

// groupBuckets are one group's buckets within one transaction.
type groupBuckets struct {
	root, meta, state *bolt.Bucket
}

func openGroupBuckets(tx *bolt.Tx, id GroupID) (groupBuckets, error) {
	root := tx.Bucket(groupBucketName(id))
	if root == nil {
		return groupBuckets{}, fmt.Errorf("group %d: %w: no bucket", id, errCorrupt)
	}
	gb := groupBuckets{root: root, meta: root.Bucket(bucketMeta), state: root.Bucket(bucketState)}
	if gb.meta == nil || gb.state == nil {
		return groupBuckets{}, fmt.Errorf("group %d: %w: missing sub-bucket", id, errCorrupt)
	}
	return gb, nil
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

// initialIndex and initialTerm are the point every replica of a freshly
// bootstrapped group starts from: an empty snapshot at index 1, term 1
// whose ConfState lists the voters. All replicas write the same values, so
// their logs agree and they can elect a leader without replicating
// configuration entries.
const (
	initialIndex = 1
	initialTerm  = 1
)

// groupState is what state.db holds for a group when it opens.
type groupState struct {
	conf                  *pb.ConfState
	appliedIdx, appliedTm uint64
	// replica is this node's replica id in the group (0: its node id).
	replica uint64
}

// createGroupState creates the group's buckets if absent (in the
// applier's transaction): at the bootstrap point with voters, or, with
// no voters, blank (nothing applied, no configuration: a replica that
// joins a running group and gets everything in a snapshot) under replica.
func createGroupState(tx *bolt.Tx, id GroupID, voters []uint64, replica uint64) error {
	if root := tx.Bucket(groupBucketName(id)); root != nil {
		return dropStaging(root)
	}
	root, err := tx.CreateBucket(groupBucketName(id))
	if err != nil {
		return err
	}
	meta, err := root.CreateBucket(bucketMeta)
	if err != nil {
		return err
	}
	if _, err := root.CreateBucket(bucketState); err != nil {
		return err
	}
	if len(voters) == 0 {
		if err := meta.Put(keyReplica, binary.BigEndian.AppendUint64(nil, replica)); err != nil {
			return err
		}
		if err := putConf(meta, &pb.ConfState{}); err != nil {
			return err
		}
		return meta.Put(keyApplied, encodePair(0, 0))
	}
	if err := putConf(meta, &pb.ConfState{Voters: voters}); err != nil {
		return err
	}
	return meta.Put(keyApplied, encodePair(initialIndex, initialTerm))
}

func readGroupState(gb groupBuckets) (groupState, error) {
	var gs groupState
	gs.conf = &pb.ConfState{}
	if err := proto.Unmarshal(gb.meta.Get(keyConf), gs.conf); err != nil {
		return gs, fmt.Errorf("conf state: %w: %w", errCorrupt, err)
	}
	var err error
	if gs.appliedIdx, gs.appliedTm, err = decodePair(gb.meta.Get(keyApplied)); err != nil {
		return gs, fmt.Errorf("applied: %w", err)
	}
	if v := gb.meta.Get(keyReplica); v != nil {
		if len(v) != 8 {
			return gs, fmt.Errorf("replica: %w", errCorrupt)
		}
		gs.replica = binary.BigEndian.Uint64(v)
	}
	return gs, nil
}

// checkFormat stamps a new state.db with formatVersion and refuses one of
// a format this release does not read.
func checkFormat(db *bolt.DB) error { return checkFormatOf(db, readableFormats) }

// checkFormatOf is checkFormat for a release that reads the formats
// readable (the first is the one it writes).
func checkFormatOf(db *bolt.DB, readable []uint64) error {
	return db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketNode)
		if err != nil {
			return err
		}
		v := b.Get(keyFormat)
		if v == nil {
			return b.Put(keyFormat, binary.BigEndian.AppendUint64(nil, readable[0]))
		}
		if len(v) != 8 {
			return fmt.Errorf("raftlog: %s: %w: format marker %x", db.Path(), errCorrupt, v)
		}
		if have := binary.BigEndian.Uint64(v); !slices.Contains(readable, have) {
			return &FormatError{Path: db.Path(), Have: have, Readable: readable}
		}
		return nil
	})
}

// FormatError: the state file has a format this release does not read (a
// later release wrote it).
type FormatError struct {
	Path     string
	Have     uint64
	Readable []uint64
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("raftlog: %s has format %d, this release reads formats %v; use the release that wrote it or a later one (docs/operations.md, \"Rolling restarts\"), or restore this node from a peer (docs/operations.md, \"Backup and restore\")", e.Path, e.Have, e.Readable)
}

// RaiseFormat durably marks the data dir as format 3 (formatMembership)
// so that a release that reads only format 2, one without cluster
// membership, refuses to open it: the caller raises it once the cluster
// made its first membership change. Idempotent and cheap once done.
func (n *Node) RaiseFormat() error {
	if n.formatRaised.Load() {
		return nil
	}
	err := n.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketNode)
		if b == nil {
			return fmt.Errorf("raftlog: %s: %w: no node bucket", n.db.Path(), errCorrupt)
		}
		if v := b.Get(keyFormat); len(v) == 8 && binary.BigEndian.Uint64(v) >= formatMembership {
			return nil
		}
		n.log.Info().Int("format", formatMembership).Msg("data dir format raised: a release without cluster membership can no longer open it")
		return b.Put(keyFormat, binary.BigEndian.AppendUint64(nil, formatMembership))
	})
	if err != nil {
		return fmt.Errorf("raftlog: raise format: %w", err)
	}
	n.formatRaised.Store(true)
	return nil
}

func putConf(meta *bolt.Bucket, conf *pb.ConfState) error {
	v, err := proto.Marshal(conf)
	if err != nil {
		return err
	}
	return meta.Put(keyConf, v)
}

// dropStaging deletes a snapshot's partly loaded state under a group's
// root, if any.
func dropStaging(root *bolt.Bucket) error {
	if root.Bucket(bucketStaging) == nil {
		return nil
	}
	return root.DeleteBucket(bucketStaging)
}
