package leadership

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// NodeInfo is what a node advertises about itself in memberlist metadata.
type NodeInfo struct {
	ID uint64
	// IngressAddr is the HTTP ingress address.
	IngressAddr string
	// AdminAddr is the HTTP admin address.
	AdminAddr string
	// NodeAddr is the gRPC address the other nodes dial (Raft, dispatch).
	NodeAddr string
}

// Member is a node seen through gossip.
type Member struct {
	NodeInfo
	// GossipAddr is the address gossip reaches the node at (host:port).
	GossipAddr string
	// Alive is false once the node left or was declared dead.
	Alive bool
}

// Wire format of NodeInfo in node metadata: a version byte, uvarint id,
// then three uvarint-length-prefixed strings.
const metaVersion = 1

// metaMaxSize is memberlist's cap on node metadata (memberlist.MetaMaxSize;
// memberlist panics past it).
const metaMaxSize = 512

var errMalformedMeta = errors.New("malformed node metadata")

func encodeNodeInfo(n NodeInfo) []byte {
	buf := []byte{metaVersion}
	buf = binary.AppendUvarint(buf, n.ID)
	for _, s := range []string{n.IngressAddr, n.AdminAddr, n.NodeAddr} {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	return buf
}

func decodeNodeInfo(buf []byte) (NodeInfo, error) {
	var n NodeInfo
	if len(buf) == 0 || buf[0] != metaVersion {
		return n, fmt.Errorf("%w: missing or unknown version", errMalformedMeta)
	}
	r := uvarintReader{buf: buf[1:]}
	n.ID = r.next()
	var strs [3]string
	for i := range strs {
		l := r.next()
		if r.err != nil || l > uint64(len(r.buf)) {
			return n, fmt.Errorf("%w: field %d", errMalformedMeta, i)
		}
		strs[i] = string(r.buf[:l])
		r.buf = r.buf[l:]
	}
	if r.err != nil || len(r.buf) != 0 {
		return n, fmt.Errorf("%w: trailing bytes", errMalformedMeta)
	}
	n.IngressAddr, n.AdminAddr, n.NodeAddr = strs[0], strs[1], strs[2]
	return n, nil
}
