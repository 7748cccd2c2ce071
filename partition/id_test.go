package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestIDRoundTrip(t *testing.T) {
	id := RandomID()
	got, err := ParseID(id.String())
	if err != nil || got != id {
		t.Fatalf("ParseID(%q) = %v, %v; want %v", id.String(), got, err, id)
	}
	s := id.String()
	// 24 bytes need 39 base32 characters with 3 spare bits in the last one;
	// setting a spare bit still decodes to the same id, but is not canonical.
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	nonCanonical := s[:len(s)-1] + string(alphabet[strings.IndexByte(alphabet, s[len(s)-1])+1])
	for _, bad := range []string{"", "inv_", "inv_!!", "xyz_aaaa", s[:20], s + "a", nonCanonical} {
		if _, err := ParseID(bad); !errors.Is(err, ErrMalformedID) {
			t.Errorf("ParseID(%q) error = %v, want ErrMalformedID", bad, err)
		}
	}
}

// TestRandomIDsStoreInCreationOrder: ids minted later sort later under
// recordKey (so a partition's new records append to its index), their
// partition keys stay spread over all partitions, and they never repeat.
func TestRandomIDsStoreInCreationOrder(t *testing.T) {
	t0 := time.UnixMilli(1_780_000_000_000)
	seen := map[InvocationID]bool{}
	parts := map[uint32]bool{}
	var prev []byte
	for i := range 2000 {
		id := randomIDAt(t0.Add(time.Duration(i) * time.Millisecond))
		if seen[id] {
			t.Fatalf("id %v minted twice", id)
		}
		seen[id] = true
		parts[PartitionFor(id.PartitionKey(), 8)] = true
		k := recordKey(id[:])
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("id %d: record key %x does not sort after %x", i, k, prev)
		}
		prev = k
		if got := int64(binary.BigEndian.Uint64(append([]byte{0, 0}, id[8:14]...))); got != t0.UnixMilli()+int64(i) {
			t.Fatalf("id %d carries time %d, want %d", i, got, t0.UnixMilli()+int64(i))
		}
	}
	if len(parts) != 8 {
		t.Errorf("2000 ids reached %d of 8 partitions", len(parts))
	}
}

func TestIdempotentIDIsStableAndUnambiguous(t *testing.T) {
	if IdempotentID("a", "b", "k") != IdempotentID("a", "b", "k") {
		t.Fatal("same inputs gave different ids")
	}
	if IdempotentID("ab", "", "k") == IdempotentID("a", "b", "k") {
		t.Fatal("length prefix missing: concatenations collide")
	}
}

func TestPartitionForMatchesKeyRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []uint32{1, 2, 3, 4, 7, 16} {
		for p := uint32(1); p <= n; p++ {
			first, last := KeyRange(p, n)
			for _, k := range []uint64{first, last, first + (last-first)/2} {
				if got := PartitionFor(k, n); got != p {
					t.Fatalf("n=%d: PartitionFor(%d)=%d, want %d (range %d..%d)", n, k, got, p, first, last)
				}
			}
			if p > 1 {
				_, prevLast := KeyRange(p-1, n)
				if prevLast+1 != first {
					t.Fatalf("n=%d: gap between partitions %d and %d", n, p-1, p)
				}
			}
		}
		for i := 0; i < 1000; i++ {
			k := rng.Uint64()
			p := PartitionFor(k, n)
			first, last := KeyRange(p, n)
			if k < first || k > last {
				t.Fatalf("n=%d key %d -> %d outside %d..%d", n, k, p, first, last)
			}
		}
	}
}
