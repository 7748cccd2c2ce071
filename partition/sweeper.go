package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/raftgate/raftgate/results"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// sweepLoop is the leader's retention sweeper for one term: every
// SweepInterval, and again as soon as a Purge that stopped at its limit
// applies, it proposes the next Purge while results have expired. One
// Purge deletes at most cfg.PurgeLimit results, so a backlog (after
// downtime or a shorter retention) is worked off in bounded entries that
// other commands and groups interleave with.
func (p *Processor) sweepLoop(ctx context.Context, term uint64) {
	clock := p.retentionClock(ctx, term)
	t := time.NewTicker(p.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.sweepCh:
		}
		if _, err := p.sweepOnce(ctx, clock); err != nil {
			p.logger.Warn().Err(err).Msg("retention sweep failed")
		}
	}
}

// sweepOnce proposes Purge{clock.now() - Retention, PurgeLimit} when a
// stored result is older, and reports whether it did.
func (p *Processor) sweepOnce(ctx context.Context, clock retentionClock) (bool, error) {
	before := clock.now().Add(-p.cfg.Retention).UnixMilli()
	var oldest int64
	var found bool
	if err := p.log.View(ctx, func(b *bolt.Bucket) error {
		oldest, found = results.Oldest(b)
		return nil
	}); err != nil {
		return false, fmt.Errorf("partition: sweep: %w", err)
	}
	if !found || oldest >= before {
		return false, nil
	}
	p.submit(ctx, purgeCmd(&rpc.Purge{BeforeUnixMs: before, Limit: uint32(p.cfg.PurgeLimit), ProposedAtUnixMs: p.now().UnixMilli()}), nil)
	return true, nil
}

// retentionClock is the time a leader's sweeper purges by: its own clock,
// but never ahead of log time, the newest timestamp that earlier terms'
// proposers stamped into the state (stored when this term began) plus
// the time this leader has measured since. A leader whose wall clock runs
// ahead of the clocks that stamped the results would otherwise purge them
// early, all of them at once when it runs ahead by more than Retention; a
// leader whose clock runs behind purges late, never early. The elapsed
// time is a difference of two readings of the same clock (monotonic for
// time.Now), which skew does not affect.
//
// The cost: on an idle partition log time advances only while one leader
// stays; a result completed at the newest timestamp lives at most
// Retention (plus SweepInterval) after the term began.
type retentionClock struct {
	wall   func() time.Time
	start  time.Time // wall() when the term began
	newest int64     // unix ms; 0: no bound (nothing stamped, or unknown)
}

func (c retentionClock) now() time.Time {
	now := c.wall()
	if c.newest == 0 {
		return now
	}
	if logTime := time.UnixMilli(c.newest).Add(now.Sub(c.start)); logTime.Before(now) {
		return logTime
	}
	return now
}

// retentionClock reads the newest timestamp in this replica's state as
// this node begins to lead term. The state must hold no entry of term
// itself, whose timestamps this leader stamped: appliedTerm, read after
// the View, proves it (a transaction is applied before it commits). This
// runs as the node learns it leads, before its first proposals of the term
// can have committed, so the proof fails only in a rare race; the sweeper
// then falls back to the wall clock for the term and says so.
func (p *Processor) retentionClock(ctx context.Context, term uint64) retentionClock {
	c := retentionClock{wall: p.now, start: p.now()}
	var newest int64
	err := p.log.View(ctx, func(b *bolt.Bucket) error {
		newest = newestStamp(b)
		return nil
	})
	switch {
	case err != nil:
		p.logger.Warn().Err(err).Msg("retention clock: cannot read the state; purging by the wall clock this term")
	case p.appliedTerm.Load() >= term:
		p.logger.Warn().Uint64("term", term).Msg("retention clock: this term's entries applied before the sweeper started; purging by the wall clock this term")
	default:
		c.newest = newest
	}
	return c
}

// newestStamp is the newest proposer timestamp in the state: the latest of
// the newest result's completion and the newest invocation's acceptance
// (0 when there is neither).
func newestStamp(b *bolt.Bucket) int64 {
	newest, _ := results.Newest(b)
	if idx := b.Bucket(createdBucket); idx != nil {
		if k, _ := idx.Cursor().Last(); k != nil {
			newest = max(newest, rpc.ListPositionTime(k))
		}
	}
	return newest
}
