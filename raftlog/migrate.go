package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/raftgate/raftgate/raftlog/wal"
)

// Format 1 (the first release) kept everything in DataDir/raft.db: per
// group bucket, a "log" bucket (index -> type byte, uvarint term, data) and
// meta keys "hard" (term, vote, commit) and "snap" beside "conf" and
// "applied". migrateFormat1 moves each group's log past its applied index
// and its hard state into a new write-ahead log, deletes them from the
// file, stamps it with format 2 and renames it state.db. Each step can be
// interrupted: until the stamp is committed, raft.db is untouched and a
// restart starts over (a partial wal/ is discarded); after it, only the
// rename is left to do.
const format1File = "raft.db"

var (
	format1Log  = []byte("log")
	format1Hard = []byte("hard")
	format1Snap = []byte("snap")
)

func migrateFormat1(dataDir string, lg zerolog.Logger) error {
	oldPath := filepath.Join(dataDir, format1File)
	if _, err := os.Stat(oldPath); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	newPath := filepath.Join(dataDir, stateFile)
	if _, err := os.Stat(newPath); err == nil {
		return fmt.Errorf("raftlog: %s holds both %s (format 1) and %s (format 2); move one away", dataDir, format1File, stateFile)
	}
	db, err := bolt.Open(oldPath, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("raftlog: open %s to migrate it: %w", oldPath, err)
	}
	stamped := false
	err = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketNode); b != nil && b.Get(keyFormat) != nil {
			stamped = true
		}
		return nil
	})
	if err == nil && !stamped {
		lg.Info().Str("file", oldPath).Msg("data dir is format 1 (log in raft.db): moving the log into the write-ahead log")
		err = moveLogToWAL(db, filepath.Join(dataDir, walDirName), lg)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftlog: migrate %s: %w", oldPath, err)
	}
	if err := os.Rename(oldPath, newPath); err != nil {
		return fmt.Errorf("raftlog: migrate: %w", err)
	}
	if err := syncDir(dataDir); err != nil {
		return fmt.Errorf("raftlog: migrate: %w", err)
	}
	lg.Info().Str("file", newPath).Msg("data dir migrated to format 2")
	return nil
}

func moveLogToWAL(db *bolt.DB, walDir string, lg zerolog.Logger) error {
	if err := os.RemoveAll(walDir); err != nil {
		return err
	}
	w, err := wal.Open(wal.Options{Dir: walDir, Logger: lg})
	if err != nil {
		return err
	}
	var b wal.Batch
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, root *bolt.Bucket) error {
			if len(name) != 5 || name[0] != 'g' {
				return nil
			}
			g := binary.BigEndian.Uint32(name[1:])
			meta, log := root.Bucket(bucketMeta), root.Bucket(format1Log)
			if meta == nil || log == nil {
				return fmt.Errorf("group %d: %w: missing sub-bucket", g, errCorrupt)
			}
			applied, appliedTerm, err := decodePair(meta.Get(keyApplied))
			if err != nil {
				return fmt.Errorf("group %d applied: %w", g, err)
			}
			hard := meta.Get(format1Hard)
			if len(hard) != 24 {
				return fmt.Errorf("group %d hard state: %w", g, errCorrupt)
			}
			b.SetFirstIndex(g, applied, appliedTerm)
			var ents []*pb.Entry
			c := log.Cursor()
			var key [8]byte
			binary.BigEndian.PutUint64(key[:], applied+1)
			for k, v := c.Seek(key[:]); k != nil; k, v = c.Next() {
				e, err := decodeFormat1Entry(binary.BigEndian.Uint64(k), v)
				if err != nil {
					return fmt.Errorf("group %d: %w", g, err)
				}
				ents = append(ents, e)
			}
			if len(ents) > 0 {
				b.Append(g, ents)
			}
			b.SetHardState(g, &pb.HardState{
				Term:   new(binary.BigEndian.Uint64(hard)),
				Vote:   new(binary.BigEndian.Uint64(hard[8:])),
				Commit: new(binary.BigEndian.Uint64(hard[16:])),
			})
			lg.Info().Uint32("group", g).Uint64("applied", applied).Int("entries", len(ents)).Msg("group's log moved")
			return nil
		})
	})
	if err == nil {
		err = w.Write(&b, true)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
		err := tx.ForEach(func(name []byte, root *bolt.Bucket) error {
			if len(name) != 5 || name[0] != 'g' {
				return nil
			}
			if err := root.DeleteBucket(format1Log); err != nil {
				return err
			}
			meta := root.Bucket(bucketMeta)
			if err := meta.Delete(format1Hard); err != nil {
				return err
			}
			return meta.Delete(format1Snap)
		})
		if err != nil {
			return err
		}
		node, err := tx.CreateBucketIfNotExists(bucketNode)
		if err != nil {
			return err
		}
		return node.Put(keyFormat, binary.BigEndian.AppendUint64(nil, formatVersion))
	})
}

// decodeFormat1Entry decodes a format-1 log value (type byte, uvarint term,
// data), copying the data out of bbolt's memory.
func decodeFormat1Entry(index uint64, v []byte) (*pb.Entry, error) {
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

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
