package partition

import (
	"bytes"
	"context"
	"fmt"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/results"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// createdBucket: created_at (8 bytes big-endian unix ms) ‖ id → service.
// The listing index: walked backwards it gives the invocations newest
// first, so a page costs what it scans, not the size of the store; the
// service in the value lets a service filter skip other services' records
// unread. Apply keeps it beside the invocations bucket (Invoke adds, Purge
// removes).
var createdBucket = []byte("created")

// Listing bounds (rpc.ListInvocations limit and max_scan).
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
	// DefaultListScan bounds the index entries one page may look at, so a
	// selective filter over a large store answers in bounded time with a
	// resume position instead of walking everything.
	DefaultListScan = 10000
	MaxListScan     = 100000
)

// RequestPreviewBytes is how much of a request body a completed record
// keeps (the rest is not needed to run it any more).
const RequestPreviewBytes = 4096

// initListing creates the index; state written before it existed is
// indexed from its records, in key order, identically on every replica.
func initListing(b *bolt.Bucket) error {
	if idx := b.Bucket(createdBucket); idx != nil {
		idx.FillPercent = createdFill
		return nil
	}
	idx, err := b.CreateBucket(createdBucket)
	if err != nil {
		return fmt.Errorf("partition: create listing index: %w", err)
	}
	idx.FillPercent = createdFill
	return b.Bucket(invocationsBucket).ForEach(func(k, data []byte) error {
		rec := &rpc.InvocationRecord{}
		if err := proto.Unmarshal(data, rec); err != nil {
			return fmt.Errorf("partition: index record %x: %w", k, err)
		}
		return idx.Put(positionOf(rec), []byte(rec.Invoke.Service))
	})
}

// indexCreated adds a new record to the listing index.
func indexCreated(b *bolt.Bucket, rec *rpc.InvocationRecord) error {
	// Key and value in one allocation: bbolt copies the key, and keeps only
	// the value until the transaction commits.
	pos := positionOf(rec)
	kv := append(make([]byte, 0, len(pos)+len(rec.Invoke.Service)), pos...)
	kv = append(kv, rec.Invoke.Service...)
	key, service := kv[:len(pos):len(pos)], kv[len(pos):]
	if err := b.Bucket(createdBucket).Put(key, service); err != nil {
		return fmt.Errorf("partition: index record: %w", err)
	}
	return markNew(b, key)
}

// unindexCreated removes id's record from the listing index; call it before
// the record is deleted (the record holds the creation time).
func unindexCreated(b *bolt.Bucket, id []byte) error {
	rec, found, err := getRecord(b, id)
	if err != nil || !found {
		return err
	}
	if err := b.Bucket(createdBucket).Delete(positionOf(rec)); err != nil {
		return fmt.Errorf("partition: unindex record: %w", err)
	}
	return nil
}

// keepRequestPreview cuts a completed record's request body to its first
// RequestPreviewBytes and remembers its length.
func keepRequestPreview(rec *rpc.InvocationRecord) {
	body := rec.Invoke.Body
	rec.RequestBodyBytes = uint32(len(body))
	if len(body) > RequestPreviewBytes {
		rec.Invoke.Body = bytes.Clone(body[:RequestPreviewBytes])
	}
}

func positionOf(rec *rpc.InvocationRecord) []byte {
	return rpc.ListPosition(rec.AcceptedAtUnixMs, rec.Invoke.InvocationId)
}

// List returns one page of this partition's invocations, newest first, that
// match req's filters; linearizable like Status. See rpc.ListInvocations.
func (p *Processor) List(ctx context.Context, req *rpc.ListInvocations) (*rpc.InvocationList, error) {
	if n := len(req.GetBefore()); n != 0 && n != rpc.ListPositionLen {
		return nil, fmt.Errorf("partition: list: position has %d bytes, want %d: %w", n, rpc.ListPositionLen, rpc.ErrInvalid)
	}
	if err := p.leaderRead(ctx); err != nil {
		return nil, err
	}
	var out *rpc.InvocationList
	// A page may scan MaxListScan entries: beside the applier, so other
	// partitions' acknowledgements do not wait for it.
	err := p.log.ViewCheckpoint(ctx, func(b *bolt.Bucket) error {
		var err error
		out, err = listInvocations(b, req, p.invoker)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("partition: list: %w", err)
	}
	return out, nil
}

// listInvocations walks the listing index backwards from req's start,
// filtering, until it has req.Limit records or looked at req.MaxScan
// entries. live tells pending records being delivered or held.
func listInvocations(b *bolt.Bucket, req *rpc.ListInvocations, live liveView) (*rpc.InvocationList, error) {
	limit := clampDefault(req.GetLimit(), DefaultListLimit, MaxListLimit)
	maxScan := clampDefault(req.GetMaxScan(), DefaultListScan, MaxListScan)
	out := &rpc.InvocationList{}
	idx := b.Bucket(createdBucket)
	if idx == nil {
		return out, nil
	}
	start := req.GetBefore()
	if t := req.GetCreatedBeforeUnixMs(); t > 0 {
		if bound := rpc.ListPosition(t, make([]byte, invocation.IDLen)); start == nil || bytes.Compare(bound, start) < 0 {
			start = bound
		}
	}
	c := idx.Cursor()
	var k, service []byte
	if start == nil {
		k, service = c.Last()
	} else if k, _ = c.Seek(start); k == nil {
		k, service = c.Last()
	} else {
		k, service = c.Prev() // Seek lands at or after start; start is exclusive
	}
	var last []byte
	for ; k != nil && out.Scanned < maxScan && uint32(len(out.Records)) < limit; k, service = c.Prev() {
		if rpc.ListPositionTime(k) < req.GetCreatedAfterUnixMs() {
			k = nil // older than the window: nothing further can match
			break
		}
		out.Scanned++
		last = k
		if req.GetService() != "" && string(service) != req.GetService() {
			continue
		}
		rec, found, err := getRecord(b, k[8:])
		if err != nil {
			return nil, err
		}
		if !found {
			// Only an older raftgate purging state that a newer one
			// indexed leaves such an entry: nothing to list.
			continue
		}
		ok, err := matches(b, rec, req, live)
		if err != nil {
			return nil, err
		}
		if ok {
			out.Records = append(out.Records, rec)
		}
	}
	if k != nil {
		out.Resume = bytes.Clone(last)
	}
	return out, nil
}

// liveView is what the leader's invoker knows of pending invocations
// beyond state.
type liveView interface {
	isDelivering(id []byte) bool
	heldByOf(id []byte) string
}

// showLive marks a pending rec RUNNING while it is delivered, else names
// the limit that holds it.
func showLive(rec *rpc.InvocationRecord, live liveView) {
	if rec.State != rpc.InvocationRecord_PENDING {
		return
	}
	id := rec.Invoke.GetInvocationId()
	if live.isDelivering(id) {
		rec.State = rpc.InvocationRecord_RUNNING
	} else {
		rec.HeldBy = live.heldByOf(id)
	}
}

// matches applies req's filters to rec and, when it matches, fills in
// what a listing shows: the running state or the limit holding it, and
// the result without bodies.
func matches(b *bolt.Bucket, rec *rpc.InvocationRecord, req *rpc.ListInvocations, live liveView) (bool, error) {
	inv := rec.Invoke
	if (req.GetService() != "" && inv.GetService() != req.GetService()) ||
		(req.GetHandler() != "" && inv.GetHandler() != req.GetHandler()) ||
		(req.GetIdempotencyKey() != "" && inv.GetIdempotencyKey() != req.GetIdempotencyKey()) ||
		(req.GetKey() != "" && inv.GetKey() != req.GetKey()) {
		return false, nil
	}
	showLive(rec, live)
	want := req.GetStatus()
	switch want {
	case rpc.ListInvocations_PENDING:
		if rec.State != rpc.InvocationRecord_PENDING {
			return false, nil
		}
	case rpc.ListInvocations_RUNNING:
		if rec.State != rpc.InvocationRecord_RUNNING {
			return false, nil
		}
	case rpc.ListInvocations_QUEUED:
		if rec.State != rpc.InvocationRecord_QUEUED {
			return false, nil
		}
	case rpc.ListInvocations_SCHEDULED:
		if rec.State != rpc.InvocationRecord_SCHEDULED {
			return false, nil
		}
	case rpc.ListInvocations_PAUSED:
		if rec.State != rpc.InvocationRecord_PAUSED {
			return false, nil
		}
	case rpc.ListInvocations_COMPLETED, rpc.ListInvocations_FAILED:
		if rec.State != rpc.InvocationRecord_COMPLETED {
			return false, nil
		}
	}
	if rec.State == rpc.InvocationRecord_COMPLETED {
		res, found, err := results.Get(b, rec.CompletedAtUnixMs, inv.GetInvocationId())
		if err != nil {
			return false, err
		}
		if found {
			rec.Result = res.Result
			rec.Result.Body = nil
		}
		if want == rpc.ListInvocations_FAILED && !rec.GetResult().GetFailed() {
			return false, nil
		}
	}
	if rec.RequestBodyBytes == 0 {
		rec.RequestBodyBytes = uint32(len(inv.Body))
	}
	inv.Body = nil
	return true, nil
}

func clampDefault(v, def, most uint32) uint32 {
	if v == 0 {
		return def
	}
	return min(v, most)
}
