package invocation

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestIDRoundTrip(t *testing.T) {
	id := Random()
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

// TestRandomIDsStoreInCreationOrder: ids minted later sort later by the
// bytes after the partition key, which is how a partition keys its records
// (so its new records append to its index), their
// partition keys stay spread over all partitions, and they never repeat.
func TestRandomIDsStoreInCreationOrder(t *testing.T) {
	t0 := time.UnixMilli(1_780_000_000_000)
	seen := map[ID]bool{}
	parts := map[uint32]bool{}
	var prev []byte
	for i := range 2000 {
		id := randomAt(t0.Add(time.Duration(i) * time.Millisecond))
		if seen[id] {
			t.Fatalf("id %v minted twice", id)
		}
		seen[id] = true
		parts[PartitionFor(id.PartitionKey(), 8)] = true
		k := id[8:]
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

// TestRandomInStaysInItsPartition: RandomIn's keys fall in the asked
// partition's range, spread over it, and the ids still keep creation order
// after the key.
func TestRandomInStaysInItsPartition(t *testing.T) {
	for _, n := range []uint32{1, 2, 3, 4, 7, 64} {
		for p := uint32(1); p <= n; p++ {
			first, last := KeyRange(p, n)
			lo, hi := ^uint64(0), uint64(0)
			for range 200 {
				id := RandomIn(p, n)
				k := id.PartitionKey()
				if got := PartitionFor(k, n); got != p {
					t.Fatalf("RandomIn(%d, %d) gave key %#x of partition %d", p, n, k, got)
				}
				lo, hi = min(lo, k), max(hi, k)
			}
			if width := last - first; hi-lo < width/2 {
				t.Fatalf("RandomIn(%d, %d): 200 keys span only %#x of the range's %#x", p, n, hi-lo, width)
			}
		}
	}
	a, b := RandomIn(2, 4), RandomIn(2, 4)
	if a == b {
		t.Fatal("two RandomIn ids are equal")
	}
}

func TestIdempotentIDIsStableAndUnambiguous(t *testing.T) {
	if Idempotent("a", "b", "k") != Idempotent("a", "b", "k") {
		t.Fatal("same inputs gave different ids")
	}
	if Idempotent("ab", "", "k") == Idempotent("a", "b", "k") {
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

// TestKeyRangesArePinned: the ranges are part of the on-disk layout (an id
// stored in a partition must keep routing there), so they must not move.
func TestKeyRangesArePinned(t *testing.T) {
	for _, c := range []struct {
		n, p        uint32
		first, last uint64
	}{
		{1, 1, 0, 0xffffffffffffffff},
		{2, 1, 0, 0x7fffffffffffffff},
		{2, 2, 0x8000000000000000, 0xffffffffffffffff},
		{3, 1, 0, 0x5555555555555555},
		{3, 2, 0x5555555555555556, 0xaaaaaaaaaaaaaaaa},
		{3, 3, 0xaaaaaaaaaaaaaaab, 0xffffffffffffffff},
		{7, 1, 0, 0x2492492492492492},
		{7, 2, 0x2492492492492493, 0x4924924924924924},
		{7, 4, 0x6db6db6db6db6db7, 0x9249249249249249},
		{7, 7, 0xdb6db6db6db6db6e, 0xffffffffffffffff},
		{16, 9, 0x8000000000000000, 0x8fffffffffffffff},
	} {
		if first, last := KeyRange(c.p, c.n); first != c.first || last != c.last {
			t.Errorf("KeyRange(%d, %d) = %#x..%#x, want %#x..%#x", c.p, c.n, first, last, c.first, c.last)
		}
	}
}

// TestRoutingMatchesExactArithmetic checks PartitionFor and KeyRange against
// the definition computed with big integers: key k is in partition
// floor(k·n / 2⁶⁴) + 1, and partition p starts at ceil((p-1)·2⁶⁴ / n).
func TestRoutingMatchesExactArithmetic(t *testing.T) {
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []uint32{2, 3, 5, 7, 10, 64, 1000, 1<<32 - 1} {
		bn := new(big.Int).SetUint64(uint64(n))
		for i := 0; i < 200; i++ {
			k := rng.Uint64()
			want := new(big.Int).Div(new(big.Int).Mul(new(big.Int).SetUint64(k), bn), two64).Uint64() + 1
			if got := PartitionFor(k, n); uint64(got) != want {
				t.Fatalf("PartitionFor(%#x, %d) = %d, want %d", k, n, got, want)
			}
			p := uint32(rng.Uint64N(uint64(n))) + 1
			num := new(big.Int).Mul(big.NewInt(int64(p-1)), two64)
			num.Add(num, new(big.Int).Sub(bn, big.NewInt(1))) // ceiling
			wantFirst := num.Div(num, bn).Uint64()
			if first, _ := KeyRange(p, n); first != wantFirst {
				t.Fatalf("KeyRange(%d, %d) starts at %#x, want %#x", p, n, first, wantFirst)
			}
		}
	}
}

func TestCheckOwner(t *testing.T) {
	id := Random()
	own := PartitionFor(id.PartitionKey(), 4)
	if err := CheckOwner(id.Bytes(), own, 4); err != nil {
		t.Fatalf("CheckOwner on the owner: %v", err)
	}
	if err := CheckOwner(id.Bytes(), own%4+1, 4); !errors.Is(err, ErrNotOwner) {
		t.Errorf("CheckOwner on another partition = %v, want ErrNotOwner", err)
	}
	if err := CheckOwner(id[:3], own, 4); !errors.Is(err, ErrMalformedID) {
		t.Errorf("CheckOwner on a short id = %v, want ErrMalformedID", err)
	}
}

// Every id of one key of a keyed service carries the key's partition key;
// ids derived from different parts differ.
func TestKeyedIDs(t *testing.T) {
	pk := KeyedPartitionKey("Counter", "alice")
	if pk == KeyedPartitionKey("Counter", "bob") || pk == KeyedPartitionKey("Counte", "ralice") {
		t.Fatal("partition keys of different keys collide")
	}
	ids := []ID{RandomKeyed("Counter", "alice"), RandomKeyed("Counter", "alice"),
		IdempotentKeyed("Counter", "alice", "add", "k1"), WorkflowRun("Counter", "alice")}
	seen := map[ID]bool{}
	for _, id := range ids {
		if id.PartitionKey() != pk {
			t.Fatalf("%s: partition key %x, want %x", id, id.PartitionKey(), pk)
		}
		if seen[id] {
			t.Fatalf("%s minted twice", id)
		}
		seen[id] = true
	}
	if IdempotentKeyed("Counter", "alice", "add", "k1") != ids[2] || WorkflowRun("Counter", "alice") != ids[3] {
		t.Fatal("derived ids are not deterministic")
	}
	if IdempotentKeyed("Counter", "alice", "add", "k2") == ids[2] || WorkflowRun("Signup", "alice") == ids[3] {
		t.Fatal("derived ids of different inputs collide")
	}
}

// TestIDTextPinned pins the printed form (ids are in clients' hands) and
// Append's agreement with String.
func TestIDTextPinned(t *testing.T) {
	var id ID
	for i := range id {
		id[i] = byte(i * 11)
	}
	const want = "inv_aafrmijmg5be2wddnz4yjd42uwylxrwr3tt7f7i" // base32 of the bytes, checked independently
	if got := id.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := string(id.Append([]byte("x"))); got != "x"+want {
		t.Fatalf("Append = %q, want %q", got, "x"+want)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = id.String() }); allocs > 1 {
		t.Fatalf("String took %.0f allocations, want 1", allocs)
	}
}
