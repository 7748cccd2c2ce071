package invocation

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// IDLen is the length of an invocation id in bytes: an 8-byte partition key
// followed by 16 id bytes.
const IDLen = 24

// idPrefix starts every printed invocation id.
const idPrefix = "inv_"

// idEncoding prints ids in lowercase base32 without padding: URL- and
// header-safe, case-insensitive on input.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ErrMalformedID is returned (wrapped) by ParseID for text that is not an
// invocation id.
var ErrMalformedID = errors.New("malformed invocation id")

// ID identifies one invocation. Because the partition key is part
// of it, any node can route a lookup by id without a directory.
type ID [IDLen]byte

// PartitionKey is the 64-bit key that selects the partition.
func (id ID) PartitionKey() uint64 { return binary.BigEndian.Uint64(id[:8]) }

// textLen is the length of a printed id.
const textLen = len(idPrefix) + (IDLen*8+4)/5

// String prints the id as inv_ followed by base32.
func (id ID) String() string {
	var b [textLen]byte
	return string(id.Append(b[:0]))
}

// Append appends the printed id to b (String without its allocations).
func (id ID) Append(b []byte) []byte {
	return idEncoding.AppendEncode(append(b, idPrefix...), id[:])
}

// Bytes returns the id's wire form.
func (id ID) Bytes() []byte { return append([]byte(nil), id[:]...) }

// ParseID parses the printed form of an id.
func ParseID(s string) (ID, error) {
	var id ID
	rest, ok := strings.CutPrefix(s, idPrefix)
	if !ok {
		return id, fmt.Errorf("%w %q: must start with %q", ErrMalformedID, s, idPrefix)
	}
	rest = strings.ToLower(rest)
	b, err := idEncoding.DecodeString(rest)
	// The last base32 character carries spare bits: accept only the one
	// canonical spelling of each id, so that equal ids print equally.
	if err != nil || len(b) != IDLen || idEncoding.EncodeToString(b) != rest {
		return id, fmt.Errorf("%w %q", ErrMalformedID, s)
	}
	copy(id[:], b)
	return id, nil
}

// IDFromBytes converts the wire form of an id.
func IDFromBytes(b []byte) (ID, error) {
	var id ID
	if len(b) != IDLen {
		return id, fmt.Errorf("%w: %d bytes, want %d", ErrMalformedID, len(b), IDLen)
	}
	copy(id[:], b)
	return id, nil
}

// Idempotent is the id of the invocation of service/handler with the
// caller's idempotency key: every node computes the same id for the same
// key, so a retry through any ingress lands on the same partition and is
// de-duplicated there.
func Idempotent(service, handler, key string) ID {
	h := sha256.New()
	for _, part := range []string{service, handler, key} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	var id ID
	copy(id[:], h.Sum(nil))
	return id
}

// Random returns a fresh id for an invocation without an idempotency
// key: a random partition key, then the creation time (unix milliseconds,
// 48 bits) and 80 random bits. The time makes the records a partition
// stores (keyed by the bytes after the partition key first)
// arrive in ascending order, so a new one lands on the last page of the
// partition's index instead of a random page, which keeps bbolt commits
// small; 80 random bits keep ids unique and unguessable.
func Random() ID { return randomAt(time.Now()) }

func randomAt(now time.Time) ID {
	var id ID
	if _, err := rand.Read(id[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
	}
	ms := uint64(now.UnixMilli())
	for i := range 6 {
		id[8+i] = byte(ms >> (40 - 8*i))
	}
	return id
}

// RandomIn returns a fresh id like Random whose partition key is drawn
// uniformly from the range partition p of n owns.
func RandomIn(p, n uint32) ID {
	id := Random()
	first, last := KeyRange(p, n)
	hi, _ := bits.Mul64(binary.BigEndian.Uint64(id[:8]), last-first)
	binary.BigEndian.PutUint64(id[:8], first+hi)
	return id
}

// NewRequestID returns a fresh 16-byte request id.
func NewRequestID() []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return b
}

// PartitionFor maps a partition key to its partition (1..n): partition i
// owns the contiguous range [(i-1)·2⁶⁴/n, i·2⁶⁴/n), so a later split is a
// range change, not a re-hash.
func PartitionFor(key uint64, n uint32) uint32 {
	if n <= 1 {
		return 1
	}
	hi, _ := bits.Mul64(key, uint64(n)) // floor(key·n / 2⁶⁴)
	return uint32(hi) + 1
}

// KeyRange returns the first and last partition key owned by partition p
// of n (p in 1..n).
func KeyRange(p, n uint32) (first, last uint64) {
	if n <= 1 {
		return 0, ^uint64(0)
	}
	first = rangeStart(p-1, n)
	if p == n {
		return first, ^uint64(0)
	}
	return first, rangeStart(p, n) - 1
}

// rangeStart is the smallest key k with floor(k·n / 2⁶⁴) >= i, for i < n.
func rangeStart(i, n uint32) uint64 {
	// ceil(i·2⁶⁴ / n); i < n keeps the quotient within 64 bits.
	q, r := bits.Div64(uint64(i), 0, uint64(n))
	if r != 0 {
		q++
	}
	return q
}

// ErrNotOwner is returned (wrapped) by CheckOwner for an id that belongs to
// another partition.
var ErrNotOwner = errors.New("wrong partition")

// CheckOwner returns an error wrapping ErrMalformedID or ErrNotOwner unless
// id is well formed and belongs to partition p of n. A node must never
// store an invocation in a partition that does not own its id: lookups,
// which route by the id, would not find it there.
func CheckOwner(id []byte, p, n uint32) error {
	iid, err := IDFromBytes(id)
	if err != nil {
		return err
	}
	if owner := PartitionFor(iid.PartitionKey(), n); owner != p {
		return fmt.Errorf("%w: invocation %s belongs to partition %d of %d, not %d (do all nodes use the same --partitions?)",
			ErrNotOwner, iid, owner, n, p)
	}
	return nil
}

// KeyedPartitionKey is the partition key of every invocation of the keyed
// service's (service, key): all of them live in one partition, where its
// key queue is.
func KeyedPartitionKey(service, key string) uint64 {
	sum := hashParts("key", service, key)
	return binary.BigEndian.Uint64(sum[:8])
}

// RandomKeyed is Random with the partition key of (service, key).
func RandomKeyed(service, key string) ID {
	id := Random()
	binary.BigEndian.PutUint64(id[:8], KeyedPartitionKey(service, key))
	return id
}

// IdempotentKeyed is the id of the invocation of handler of the keyed
// service's (service, key) with the caller's idempotency key: like
// Idempotent, but in the partition of (service, key).
func IdempotentKeyed(service, key, handler, idempotencyKey string) ID {
	var id ID
	sum := hashParts("idempotent", service, key, handler, idempotencyKey)
	copy(id[:], sum[:])
	binary.BigEndian.PutUint64(id[:8], KeyedPartitionKey(service, key))
	return id
}

// WorkflowRun is the id of the run of workflow service with workflow id
// key: one id per workflow id, so the partition runs it at most once while
// its record is kept.
func WorkflowRun(service, key string) ID {
	var id ID
	sum := hashParts("workflow", service, key)
	copy(id[:], sum[:])
	binary.BigEndian.PutUint64(id[:8], KeyedPartitionKey(service, key))
	return id
}

// hashParts hashes length-prefixed parts, so no two lists of parts
// collide by concatenation.
func hashParts(parts ...string) [sha256.Size]byte {
	h := sha256.New()
	for _, part := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// ScheduledKeyedRun is ScheduledRun for a schedule whose target is the
// keyed service's (service, key): the same id but in the key's partition,
// where the run must live to take its place in the key's queue.
func ScheduledKeyedRun(id string, tickMs int64, nonce []byte, service, key string) ID {
	run := ScheduledRun(id, tickMs, nonce)
	binary.BigEndian.PutUint64(run[:8], KeyedPartitionKey(service, key))
	return run
}

// SchedulePartitionKey is the partition key of schedule id: the schedule
// and the invocations of its ticks live in the partition that owns it.
func SchedulePartitionKey(id string) uint64 {
	sum := hashParts("schedule", id)
	return binary.BigEndian.Uint64(sum[:8])
}

// ScheduledRun is the id of schedule id's run for the tick at tickMs (unix
// ms): a function of (schedule, tick), so a tick fired by an old leader
// and again by a new one is one invocation. nonce tells apart runs that
// are not ticks (a trigger passes its request id); ticks pass none. The
// tick time follows the partition key, as Random puts its creation time,
// so runs are stored in time order.
func ScheduledRun(id string, tickMs int64, nonce []byte) ID {
	var run ID
	binary.BigEndian.PutUint64(run[:8], SchedulePartitionKey(id))
	ms := uint64(tickMs)
	for i := range 6 {
		run[8+i] = byte(ms >> (40 - 8*i))
	}
	sum := hashParts("scheduled-run", id, strconv.FormatInt(tickMs, 10), string(nonce))
	copy(run[14:], sum[:10])
	return run
}
