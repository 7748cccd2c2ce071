package partition

import (
	"bytes"
	"context"
	"fmt"

	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// A service's backlog (rpc.ServiceBacklog) is counted by the leader from
// its outbox, which is ordered by due time, reading keys only (no record):
//
//   - in flight: marked under way in state (Start) until the mark ends, or
//     reserved by this leader (called, or its outcome not yet applied);
//   - waiting for a limit: due, not in flight: held by a limit of flow
//     control or by the node's own caps (the invoker starts every other
//     due delivery at once);
//   - waiting for a retry: not yet due after a failed attempt (a delayed
//     send not yet due is not counted);
//   - paused: from the paused index (not in the outbox).
//
// The oldest waiting delivery is the first one waiting for a limit in due
// order: it has been due the longest. The walk stops after
// BacklogScanLimit entries (the counts are then lower bounds, flagged
// truncated), so a read costs at most that many key reads on a large
// backlog.

// BacklogScanLimit bounds the outbox entries one backlog read walks.
const BacklogScanLimit = 100_000

// Backlog returns service's backlog in this partition, read at the leader
// (linearizable like List).
func (p *Processor) Backlog(ctx context.Context, service string) (*rpc.ServiceBacklog, error) {
	if err := p.leaderRead(ctx); err != nil {
		return nil, err
	}
	var out *rpc.ServiceBacklog
	now := p.now().UnixMilli()
	err := p.log.ViewCheckpoint(ctx, func(b *bolt.Bucket) error { // a long walk: beside the applier
		all, truncated, err := countBacklogs(b, service, now, p.invoker.reserved, BacklogScanLimit)
		if err != nil {
			return err
		}
		out = all[service]
		if out == nil {
			out = &rpc.ServiceBacklog{}
		}
		out.Truncated = truncated
		out.Paused = uint64(countPausedOf(b, service))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partition: backlog: %w", err)
	}
	out.AtUnixMs = now
	return out, nil
}

// countBacklogs counts the backlog of every service in the outbox (of
// only one if service is set) at time now, walking at most limit entries.
// Paused is not counted here (pausedOf).
func countBacklogs(b *bolt.Bucket, service string, now int64, reserved func(id []byte) bool, limit int) (map[string]*rpc.ServiceBacklog, bool, error) {
	out := make(map[string]*rpc.ServiceBacklog)
	walked := 0
	truncated := false
	err := outbox.ScanQueued(b, func(q outbox.Queued) bool {
		if walked++; walked > limit {
			truncated = true
			return false
		}
		if service != "" && string(q.Service) != service {
			return true
		}
		bl := out[string(q.Service)]
		if bl == nil {
			bl = &rpc.ServiceBacklog{}
			out[string(q.Service)] = bl
		}
		switch {
		case q.StartedUntil > now || reserved(q.ID):
			bl.InFlight++
		case q.Due > now:
			if q.Attempts > 0 {
				bl.WaitingForRetry++
			}
		default:
			if bl.WaitingForLimit == 0 {
				bl.OldestWaitingDueUnixMs = q.Due
			}
			bl.WaitingForLimit++
		}
		return true
	})
	return out, truncated, err
}

// countPausedOf counts service's paused invocations.
func countPausedOf(b *bolt.Bucket, service string) int {
	pb := b.Bucket(pausedBucket)
	if pb == nil {
		return 0
	}
	prefix := append([]byte(service), 0)
	n := 0
	c := pb.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		n++
	}
	return n
}
