package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// Action applies an operator's action to one invocation and returns once
// it applied: rpc.ErrNotFound for an unknown id, rpc.ErrConflict when the
// action does not apply to its state. A restart answers the new
// invocation's id (Appended); the others nil.
func (p *Processor) Action(ctx context.Context, requestID []byte, a *rpc.InvocationAction) (*rpc.Appended, error) {
	id := a.GetInvocationId()
	if len(id) != invocation.IDLen || len(requestID) == 0 || len(requestID) > maxRequestIDLen {
		return nil, fmt.Errorf("partition: action: malformed id: %w", rpc.ErrInvalid)
	}
	now := p.now().UnixMilli()
	var cmd *rpc.Command
	switch a.GetKind() {
	case rpc.InvocationAction_RESUME:
		cmd = &rpc.Command{Cmd: &rpc.Command_Resume{Resume: &rpc.Resume{InvocationId: id, RequestId: requestID, ProposedAtUnixMs: now, Url: a.GetUrl()}}}
	case rpc.InvocationAction_RESTART:
		// The new id keeps the partition key, so the restart is one
		// command of this partition (and a keyed one stays with its key).
		nid := invocation.Random().Bytes()
		copy(nid[:8], id[:8])
		cmd = &rpc.Command{Cmd: &rpc.Command_Restart{Restart: &rpc.Restart{InvocationId: id, RequestId: requestID, ProposedAtUnixMs: now, NewInvocationId: nid}}}
	case rpc.InvocationAction_KILL:
		cmd = &rpc.Command{Cmd: &rpc.Command_Kill{Kill: &rpc.Kill{InvocationId: id, RequestId: requestID, ProposedAtUnixMs: now}}}
	case rpc.InvocationAction_PURGE:
		cmd = &rpc.Command{Cmd: &rpc.Command_PurgeInvocation{PurgeInvocation: &rpc.PurgeInvocation{InvocationId: id, RequestId: requestID, ProposedAtUnixMs: now}}}
	default:
		return nil, fmt.Errorf("partition: action: unknown kind %v: %w", a.GetKind(), rpc.ErrInvalid)
	}
	return p.request(ctx, requestID, cmd)
}

// Bulk starts bulk operation req.OperationId on this partition and answers
// its state once its Bulk applied (matched: what it applies to), or with
// req.DryRun only counts what it would change now.
func (p *Processor) Bulk(ctx context.Context, requestID []byte, req *rpc.BulkRequest) (*rpc.Operation, error) {
	if req.GetAction() == rpc.BulkAction_BULK_UNSPECIFIED {
		return nil, fmt.Errorf("partition: bulk: no action: %w", rpc.ErrInvalid)
	}
	if req.GetDryRun() {
		if err := p.leaderRead(ctx); err != nil {
			return nil, err
		}
		var op *rpc.Operation
		err := p.log.ViewCheckpoint(ctx, func(b *bolt.Bucket) error { // a scan: beside the applier
			var err error
			op, err = dryRun(b, req.GetAction(), req.GetFilter(), p.now().UnixMilli())
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("partition: bulk: %w", err)
		}
		op.Partition = p.cfg.Partition
		return op, nil
	}
	if req.GetOperationId() == "" || len(requestID) == 0 || len(requestID) > maxRequestIDLen {
		return nil, fmt.Errorf("partition: bulk: operation id and request id are required: %w", rpc.ErrInvalid)
	}
	cmd := &rpc.Command{Cmd: &rpc.Command_Bulk{Bulk: &rpc.Bulk{
		OperationId: req.GetOperationId(), RequestId: requestID, Action: req.GetAction(), Filter: req.GetFilter(),
		ProposedAtUnixMs: p.now().UnixMilli(), Chunk: uint32(p.cfg.BulkChunk),
	}}}
	if _, err := p.request(ctx, requestID, cmd); err != nil {
		return nil, err
	}
	return p.readOperation(ctx, req.GetOperationId(), true)
}

// Operation reads this partition's state of a bulk operation (matched
// known once done); rpc.ErrNotFound when it has none. Linearizable like
// Status.
func (p *Processor) Operation(ctx context.Context, id string) (*rpc.Operation, error) {
	return p.readOperation(ctx, id, false)
}

// readOperation reads an operation; countMatched also counts what it has
// yet to change (a scan: once, when it starts).
func (p *Processor) readOperation(ctx context.Context, id string, countMatched bool) (*rpc.Operation, error) {
	if err := p.leaderRead(ctx); err != nil {
		return nil, err
	}
	var op *rpc.Operation
	view := p.log.View
	if countMatched {
		view = p.log.ViewCheckpoint // a scan: beside the applier
	}
	err := view(ctx, func(b *bolt.Bucket) error {
		var err error
		op, err = readOperation(b, id, p.now().UnixMilli(), countMatched)
		return err
	})
	if err != nil {
		return nil, err
	}
	op.Partition = p.cfg.Partition
	return op, nil
}

// bulkLoop is the leader's driver of bulk operations for one term: while
// one runs it proposes a BulkStep, and the next once that one applied
// (bulkCh) and as long again has passed: a step's chunk is the most one
// entry adds to what other requests wait for, and steps take at most half
// of the partition's apply time. A step lost with a proposal is proposed
// again after bulkRecheck.
func (p *Processor) bulkLoop(ctx context.Context) {
	for {
		err := p.log.ReadIndex(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
	for {
		var running string
		err := p.log.View(ctx, func(b *bolt.Bucket) error {
			if ab := b.Bucket(operationsActiveBucket); ab != nil {
				if k, _ := ab.Cursor().First(); k != nil {
					running = string(k[8:])
				}
			}
			return nil
		})
		if err != nil {
			p.logger.Warn().Err(err).Msg("bulk: reading operations failed")
		}
		proposed := time.Now()
		if running != "" {
			p.submit(ctx, &rpc.Command{Cmd: &rpc.Command_BulkStep{BulkStep: &rpc.BulkStep{
				OperationId: running, ProposedAtUnixMs: p.now().UnixMilli()}}}, nil)
		}
		t := time.NewTimer(bulkRecheck)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.bulkCh:
			t.Stop()
			if running != "" && !sleepCtx(ctx, min(time.Since(proposed), bulkRecheck)) {
				return
			}
		case <-t.C:
		}
	}
}

// bulkRecheck is how long the bulk loop waits for a step to apply before
// it looks again (a proposal lost in a leader change, or no operation).
const bulkRecheck = time.Second
