package partition

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
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
