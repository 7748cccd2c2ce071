package rpc

import (
	"encoding/binary"

	"github.com/raftgate/raftgate/invocation"
)

// ListPositionLen is the length of a listing position
// (ListInvocations.before, InvocationList.resume).
const ListPositionLen = 8 + invocation.IDLen

// ListPosition is the listing position of an invocation accepted at
// createdAt (unix ms): createdAt big-endian ‖ id, so byte order is
// listing order. Partitions key their listing index by it; the admin API
// merges their pages by it.
func ListPosition(createdAt int64, id []byte) []byte {
	k := make([]byte, 8, ListPositionLen)
	binary.BigEndian.PutUint64(k, uint64(max(createdAt, 0)))
	return append(k, id...)
}

// ListPositionTime returns the creation time of a listing position.
func ListPositionTime(pos []byte) int64 {
	if len(pos) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(pos))
}
