package raftlog

import (
	"crypto/sha256"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestHashBucketSeesEveryChange(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "d.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	digest := func() (d [32]byte) {
		db.View(func(tx *bolt.Tx) error {
			h := sha256.New()
			hashBucket(h, tx.Bucket([]byte("s")))
			copy(d[:], h.Sum(nil))
			return nil
		})
		return d
	}
	update := func(fn func(b *bolt.Bucket) error) {
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("s"))
			if err != nil {
				return err
			}
			return fn(b)
		}); err != nil {
			t.Fatal(err)
		}
	}
	update(func(b *bolt.Bucket) error { return b.Put([]byte("ab"), []byte("c")) })
	first := digest()
	if digest() != first {
		t.Fatal("digest of unchanged state changed")
	}
	seen := map[[32]byte]string{first: "initial"}
	for name, fn := range map[string]func(b *bolt.Bucket) error{
		"value":  func(b *bolt.Bucket) error { return b.Put([]byte("ab"), []byte("d")) },
		"split":  func(b *bolt.Bucket) error { b.Delete([]byte("ab")); return b.Put([]byte("a"), []byte("bd")) },
		"nested": func(b *bolt.Bucket) error { _, err := b.CreateBucket([]byte("n")); return err },
	} {
		update(fn)
		d := digest()
		if prev, ok := seen[d]; ok {
			t.Fatalf("change %q left the digest as after %q", name, prev)
		}
		seen[d] = name
	}
}
