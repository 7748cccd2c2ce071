package raftlog

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"

	bolt "go.etcd.io/bbolt"
)

// Digest is a hash of a group's replicated state at an applied index.
// Replicas that applied the same log up to the same index have the same
// digest; operators and tests compare them to detect divergence.
type Digest struct {
	Applied uint64
	Hash    [sha256.Size]byte
}

// StateDigest hashes the group's state bucket and reads its applied index
// in one step of the applier, so the two belong together.
func (g *Group) StateDigest() (Digest, error) {
	var d Digest
	select {
	case <-g.done:
		return d, ErrStopped
	default:
	}
	// On the applier, so the digest and the applied index belong together
	// (whether checkpointed or not).
	r := &applyReq{g: g, done: make(chan struct{}), view: func(*bolt.Bucket) error { return nil }}
	r.view = func(state *bolt.Bucket) error {
		meta := state.Tx().Bucket(groupBucketName(g.id)).Bucket(bucketMeta)
		var err error
		if d.Applied, _, err = decodePair(meta.Get(keyApplied)); err != nil {
			return err
		}
		h := sha256.New()
		hashBucket(h, state)
		copy(d.Hash[:], h.Sum(nil))
		return nil
	}
	if !g.n.ap.submit(r) {
		return d, ErrStopped
	}
	g.n.ap.runIfStepped()
	<-r.done
	return d, r.err
}

// hashBucket feeds every key, value and nested bucket of b to h, in bbolt's
// key order, each length-prefixed so that no two layouts hash alike.
func hashBucket(h hash.Hash, b *bolt.Bucket) {
	var n [8]byte
	field := func(tag byte, p []byte) {
		h.Write([]byte{tag})
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			field('K', k)
			field('V', v)
			continue
		}
		field('B', k)
		hashBucket(h, b.Bucket(k))
		h.Write([]byte{'E'})
	}
}
