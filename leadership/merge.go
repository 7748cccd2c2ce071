package leadership

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Entry is what the table knows about one partition: its leader (0 when no
// leader is known) at a Raft term.
type Entry struct {
	Leader uint64
	Term   uint64
}

// Update is one entry of the table for a partition.
type Update struct {
	Partition uint32
	Entry
}

// mergeEntry returns the entry to keep when incoming meets current (have is
// false when the partition had no entry) and whether it differs from
// current. A higher term wins, a lower term never overwrites; at an equal
// term the current entry stays unless its leader was unknown (Raft elects at
// most one leader per term, so two known leaders at one term cannot both be
// right and the first one seen is kept).
func mergeEntry(current Entry, have bool, incoming Entry) (Entry, bool) {
	switch {
	case incoming.Term == 0 && incoming.Leader == 0:
		return current, false // carries nothing
	case !have:
		return incoming, true
	case incoming.Term > current.Term:
		return incoming, true
	case incoming.Term < current.Term:
		return current, false
	case current.Leader == 0 && incoming.Leader != 0:
		return incoming, true
	default:
		return current, false
	}
}

// table is the partition → leader table. It is not safe for concurrent use;
// Membership guards it with a mutex.
type table map[uint32]Entry

// apply merges one update and reports whether the table changed.
func (t table) apply(u Update) bool {
	cur, have := t[u.Partition]
	next, changed := mergeEntry(cur, have, u.Entry)
	if changed {
		t[u.Partition] = next
	}
	return changed
}

// applyAll merges updates and returns those that changed the table, with
// the entry the table now holds.
func (t table) applyAll(us []Update) []Update {
	var changed []Update
	for _, u := range us {
		if t.apply(u) {
			changed = append(changed, Update{Partition: u.Partition, Entry: t[u.Partition]})
		}
	}
	return changed
}

// updates lists the table sorted by partition.
func (t table) updates() []Update {
	us := make([]Update, 0, len(t))
	for p, e := range t {
		us = append(us, Update{Partition: p, Entry: e})
	}
	sort.Slice(us, func(i, j int) bool { return us[i].Partition < us[j].Partition })
	return us
}

// Wire format of leader updates, in broadcasts and push/pull state:
// a version byte, a uvarint count, then per update uvarint partition,
// leader and term.
const updatesVersion = 1

// errMalformedUpdates is returned (wrapped) for bytes that are not updates.
var errMalformedUpdates = errors.New("malformed leader updates")

func encodeUpdates(us []Update) []byte {
	buf := make([]byte, 0, 1+binary.MaxVarintLen32+len(us)*(binary.MaxVarintLen32+2*binary.MaxVarintLen64))
	buf = append(buf, updatesVersion)
	buf = binary.AppendUvarint(buf, uint64(len(us)))
	for _, u := range us {
		buf = binary.AppendUvarint(buf, uint64(u.Partition))
		buf = binary.AppendUvarint(buf, u.Leader)
		buf = binary.AppendUvarint(buf, u.Term)
	}
	return buf
}

func decodeUpdates(buf []byte) ([]Update, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty", errMalformedUpdates)
	}
	if buf[0] != updatesVersion {
		return nil, fmt.Errorf("%w: version %d", errMalformedUpdates, buf[0])
	}
	r := uvarintReader{buf: buf[1:]}
	n := r.next()
	// Each update takes at least 3 bytes: refuse counts the buffer cannot hold.
	if r.err != nil || n > uint64(len(r.buf))/3 {
		return nil, fmt.Errorf("%w: bad count", errMalformedUpdates)
	}
	us := make([]Update, 0, n)
	for i := uint64(0); i < n; i++ {
		p := r.next()
		leader := r.next()
		term := r.next()
		if r.err != nil || p > 1<<32-1 {
			return nil, fmt.Errorf("%w: update %d", errMalformedUpdates, i)
		}
		us = append(us, Update{Partition: uint32(p), Entry: Entry{Leader: leader, Term: term}})
	}
	if len(r.buf) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errMalformedUpdates, len(r.buf))
	}
	return us, nil
}

// uvarintReader reads uvarints and remembers the first error.
type uvarintReader struct {
	buf []byte
	err error
}

func (r *uvarintReader) next() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.err = errMalformedUpdates
		return 0
	}
	r.buf = r.buf[n:]
	return v
}
