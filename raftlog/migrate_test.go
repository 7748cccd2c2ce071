package raftlog

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// writeFormat1 writes a data dir as the first release did: raft.db with, for
// group 1, a state bucket holding entries applied up to index 3 (recorded
// the way recordingSM records them), and a log of entries 2..5 with a hard
// state committing 5.
func writeFormat1(t *testing.T, dir string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, format1File), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucket(groupBucketName(1))
		if err != nil {
			return err
		}
		meta, _ := root.CreateBucket(bucketMeta)
		log, _ := root.CreateBucket(format1Log)
		state, _ := root.CreateBucket(bucketState)
		conf, _ := proto.Marshal(&pb.ConfState{Voters: []uint64{1}})
		hard := make([]byte, 24)
		binary.BigEndian.PutUint64(hard, 2)     // term
		binary.BigEndian.PutUint64(hard[8:], 1) // vote
		binary.BigEndian.PutUint64(hard[16:], 5)
		for k, v := range map[string][]byte{
			"conf": conf, "hard": hard, "snap": encodePair(1, 1), "applied": encodePair(3, 2),
		} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		for i, data := range []string{"a", "b", "c", "d"} { // indexes 2..5, term 2
			v := append([]byte{byte(pb.EntryNormal)}, binary.AppendUvarint(nil, 2)...)
			if err := log.Put(binary.BigEndian.AppendUint64(nil, uint64(i+2)), append(v, data...)); err != nil {
				return err
			}
		}
		eb, err := state.CreateBucket(bucketEntries)
		if err != nil {
			return err
		}
		for _, data := range []string{"a", "b"} {
			seq, _ := eb.NextSequence()
			if err := eb.Put(binary.BigEndian.AppendUint64(nil, seq), []byte(data)); err != nil {
				return err
			}
		}
		return state.Put([]byte("count"), binary.BigEndian.AppendUint64(nil, 2))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateFormat1: a first-release data dir opens as format 2 with the
// same state and the log past the applied index, which is then applied;
// raft.db is gone, state.db is stamped, and a migration interrupted after
// it moved the log starts over cleanly.
func TestMigrateFormat1(t *testing.T) {
	for _, interrupted := range []bool{false, true} {
		c := newCluster(t, testSeed(t), 1, nil, nil)
		c.stop(1)
		dir := t.TempDir()
		c.dirs[1] = dir
		writeFormat1(t, dir)
		if interrupted {
			// A first attempt that wrote the log but died before stamping
			// the file: raft.db is untouched, wal/ is left over.
			db, err := bolt.Open(filepath.Join(dir, format1File), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := moveLogToWAL(db, filepath.Join(dir, walDirName), c.config(1).Logger); err != nil {
				t.Fatal(err)
			}
			// Undo the stamp and the deletions, as if the process died
			// before that transaction committed.
			db.Close()
			if err := os.Remove(filepath.Join(dir, format1File)); err != nil {
				t.Fatal(err)
			}
			writeFormat1(t, dir)
		}
		c.groups = []GroupID{1}
		c.start(1)
		c.leader(1, c.ids, 2*time.Second)
		testutil.WaitFor(t, 5*time.Second, "entries 4 and 5 applied from the migrated log", func() bool {
			return slices.Equal(entriesOf(t, c.nodes[1].Group(1)), []string{"a", "b", "c", "d"})
		})
		if _, err := os.Stat(filepath.Join(dir, format1File)); !os.IsNotExist(err) {
			t.Fatalf("raft.db still there after the migration: %v", err)
		}
		if err := c.propose(1, 1, "e"); err != nil {
			t.Fatal(err)
		}
		c.stop(1)
		c.start(1)
		c.leader(1, c.ids, 2*time.Second)
		if got := entriesOf(t, c.nodes[1].Group(1)); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
			t.Fatalf("after migration and restart: %v", got)
		}
		c.stop(1)
	}
}

// TestRefusesAnotherFormat: a state.db stamped with a format this release
// does not read is refused, not misread.
func TestRefusesAnotherFormat(t *testing.T) {
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, stateFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucketNode)
		if err != nil {
			return err
		}
		return b.Put(keyFormat, binary.BigEndian.AppendUint64(nil, 4))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, nw: NewMemNetwork(1), dirs: map[uint64]string{1: dir}, ids: []uint64{1}}
	if _, err := open(c.config(1), c.nw.transportFor); err == nil {
		t.Fatal("a state.db of format 4 was opened")
	} else {
		t.Log(err)
	}
}

// TestRaiseFormatRefusesDowngrade: a data dir is format 2 until
// RaiseFormat, which a release that reads only format 2 (the one before
// cluster membership; simulated with checkFormatOf) still opens; after it
// the data dir is format 3, which that release refuses and this one
// opens.
func TestRaiseFormatRefusesDowngrade(t *testing.T) {
	dir := t.TempDir()
	c := &cluster{t: t, nw: NewMemNetwork(1), dirs: map[uint64]string{1: dir}, ids: []uint64{1}}
	earlier := func() error {
		db, err := bolt.Open(filepath.Join(dir, stateFile), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		return checkFormatOf(db, []uint64{formatVersion})
	}
	reopen := func() *Node {
		n, err := open(c.config(1), c.nw.transportFor)
		if err != nil {
			t.Fatalf("this release refuses the data dir: %v", err)
		}
		return n
	}
	n := reopen()
	n.Close()
	if err := earlier(); err != nil {
		t.Fatalf("before RaiseFormat, the earlier release refuses the data dir: %v", err)
	}
	n = reopen()
	for range 2 { // idempotent
		if err := n.RaiseFormat(); err != nil {
			t.Fatal(err)
		}
	}
	n.Close()
	err := earlier()
	var ferr *FormatError
	if !errors.As(err, &ferr) || ferr.Have != formatMembership {
		t.Fatalf("after RaiseFormat, the earlier release's check says %v; want a refusal of format 3", err)
	}
	t.Log(err)
	n = reopen()
	if err := n.RaiseFormat(); err != nil {
		t.Fatal(err)
	}
	n.Close()
}
