package partition

import (
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// scratchDB opens a bbolt file without fsync in tb's temporary directory,
// closed when tb ends: state-machine tests measure and compare state, not
// durability.
func scratchDB(tb testing.TB) *bolt.DB {
	tb.Helper()
	db, err := bolt.Open(filepath.Join(tb.TempDir(), "scratch.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// scratchTx runs fn in a transaction of db that is rolled back, so that
// every call starts from nothing; fresh creates a new top-level bucket in
// it for one state machine.
func scratchTx(tb testing.TB, db *bolt.DB, fn func(fresh func(name string) *bolt.Bucket)) {
	tb.Helper()
	errRollback := errors.New("rollback")
	err := db.Update(func(tx *bolt.Tx) error {
		fn(func(name string) *bolt.Bucket {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				tb.Fatal(err)
			}
			return b
		})
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		tb.Fatal(err)
	}
}
