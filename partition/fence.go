package partition

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// fencesBucket: service name → 8-byte big-endian metadata log index of the
// service's latest registration change this partition was told of. It is
// created by the first fence, so a partition that never saw one keeps the
// state it had before fences existed.
var fencesBucket = []byte("fences")

// Fence makes the partition refuse, from now on, invocations of service
// checked against a registration older than index (see rpc.FenceService),
// and returns once that is applied. Leader only. Retrying is safe: a fence
// only ever raises a service's index.
func (p *Processor) Fence(ctx context.Context, requestID []byte, service string, index uint64) error {
	if service == "" || index == 0 || len(requestID) == 0 || len(requestID) > maxRequestIDLen {
		return fmt.Errorf("partition: malformed fence: %w", rpc.ErrInvalid)
	}
	_, err := p.request(ctx, requestID, fenceCmd(&rpc.FenceService{Name: service, Index: index, RequestId: requestID}))
	return err
}

func fenceCmd(c *rpc.FenceService) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_FenceService{FenceService: c}}
}

// fence raises the service's fence to c.Index (never lowers it).
func (m *machine) fence(b *bolt.Bucket, term uint64, c *rpc.FenceService, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term, appended: &rpc.Appended{}}
	switch {
	case c.Name == "" || c.Index == 0:
		r.appended, r.err = nil, fmt.Errorf("partition: malformed fence: %w", rpc.ErrInvalid)
	case fenceOf(b, c.Name) < c.Index:
		fb, err := b.CreateBucketIfNotExists(fencesBucket)
		if err != nil {
			return fmt.Errorf("partition: create fences bucket: %w", err)
		}
		if err := fb.Put([]byte(c.Name), binary.BigEndian.AppendUint64(nil, c.Index)); err != nil {
			return fmt.Errorf("partition: fence: %w", err)
		}
	}
	fx.replies = append(fx.replies, r)
	return nil
}

// fenceOf returns the service's fence (0: none).
func fenceOf(b *bolt.Bucket, service string) uint64 {
	fb := b.Bucket(fencesBucket)
	if fb == nil {
		return 0
	}
	v := fb.Get([]byte(service))
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// fencedOut reports an invocation checked against a registration that a
// fence has passed since. Invocations that were not checked (index 0, from
// an ingress older than fences) are not refused.
func fencedOut(b *bolt.Bucket, c *rpc.Invoke) bool {
	return c.ServiceRegisteredIndex != 0 && c.ServiceRegisteredIndex < fenceOf(b, c.Service)
}
