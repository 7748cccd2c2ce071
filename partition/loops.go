package partition

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raftgate/raftgate/proposals"
	"github.com/raftgate/raftgate/results"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// proposeLoop drains the queue into one CommandBatch per log entry: while
// one Propose is under way the next batch fills, so concurrent requests
// share entries (the state machine is CPU-bound per entry, not per command).
func (p *Processor) proposeLoop() {
	batch := make([]proposal, 0, p.cfg.MaxBatchCommands)
	defer p.drainQueue()
	for {
		batch = batch[:0]
		select {
		case <-p.stop:
			return
		case q := <-p.queue:
			batch = append(batch, q)
		}
		size := proto.Size(batch[0].cmd)
	fill:
		for len(batch) < p.cfg.MaxBatchCommands && size < p.cfg.MaxBatchBytes {
			select {
			case q := <-p.queue:
				batch = append(batch, q)
				size += proto.Size(q.cmd)
			default:
				break fill
			}
		}
		p.proposeBatch(batch)
	}
}

// drainQueue tells what is still queued at Close that it was not proposed
// (tracked waiters were already failed by Close).
func (p *Processor) drainQueue() {
	for {
		select {
		case q := <-p.queue:
			if q.done != nil {
				q.done(rpc.ErrLostLeadership)
			}
		default:
			return
		}
	}
}

func (p *Processor) proposeBatch(batch []proposal) {
	cmds := make([]*rpc.Command, 0, len(batch))
	var tks []proposals.Ticket[*rpc.Appended]
	var untracked []proposal
	for _, q := range batch {
		if q.tk.Tracked() {
			if !p.tracker.Alive(q.tk) {
				continue // caller gone or leadership lost while queued
			}
			tks = append(tks, q.tk)
		} else {
			untracked = append(untracked, q)
		}
		cmds = append(cmds, q.cmd)
	}
	if len(cmds) == 0 {
		return
	}
	fail := func(err error) {
		p.tracker.Fail(tks, err)
		for _, q := range untracked {
			if q.done != nil {
				q.done(err)
			}
		}
	}
	data, err := rpc.EncodeBatch(cmds...)
	if err != nil {
		fail(fmt.Errorf("partition %d: %w", p.cfg.Partition, err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ProposeTimeout)
	prop, err := p.log.Propose(ctx, data)
	cancel()
	if err != nil {
		p.logger.Debug().Err(err).Int("commands", len(cmds)).Msg("proposal refused")
		if ctx.Err() != nil {
			// Timed out inside Propose: raft may still append it, so the
			// outcome is ambiguous (retry-safe), like a lost leadership.
			fail(fmt.Errorf("partition %d: propose timed out: %w", p.cfg.Partition, rpc.ErrLostLeadership))
			return
		}
		fail(p.mapLogError(err))
		return
	}
	p.metrics.proposed(len(cmds))
	p.tracker.Proposed(tks, prop.Term)
	for _, q := range untracked {
		if q.done != nil {
			q.done(nil)
		}
	}
}

// submit queues an untracked command (invoker, sweeper), waiting for room;
// done (may be nil) runs once with the outcome of its Propose: nil when
// raft accepted it, else why not (also when ctx ended first). It must not
// block.
func (p *Processor) submit(ctx context.Context, cmd *rpc.Command, done func(error)) {
	select {
	case p.queue <- proposal{cmd: cmd, done: done}:
	case <-ctx.Done():
		if done != nil {
			done(ctx.Err())
		}
	case <-p.stop:
		if done != nil {
			done(rpc.ErrLostLeadership)
		}
	}
}

// leaderLoop runs the leader-only work (invoker, sweeper) for each term
// this node leads, and stops it as soon as leadership is lost.
func (p *Processor) leaderLoop() {
	type work struct {
		term   uint64
		cancel context.CancelFunc
		done   chan struct{}
	}
	var cur *work
	stopWork := func() {
		if cur != nil {
			cur.cancel()
			<-cur.done
			cur = nil
		}
	}
	defer stopWork()
	for {
		select {
		case <-p.stop:
			return
		case <-p.leaderCh:
		}
		leading, _, term := p.tracker.Leadership()
		if cur != nil && (!leading || term != cur.term) {
			p.logger.Info().Uint64("term", cur.term).Msg("leadership lost: stopping invoker and sweeper")
			stopWork()
		}
		if leading && cur == nil {
			ctx, cancel := context.WithCancel(context.Background())
			w := &work{term: term, cancel: cancel, done: make(chan struct{})}
			cur = w
			p.logger.Info().Uint64("term", term).Msg("leading: starting invoker and sweeper")
			go func() {
				defer close(w.done)
				p.leaderWork(ctx)
			}()
		}
	}
}

func (p *Processor) leaderWork(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.invoker.run(ctx) }()
	go func() { defer wg.Done(); p.sweepLoop(ctx) }()
	wg.Wait()
}

func (p *Processor) sweepLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := p.sweepOnce(ctx); err != nil {
				p.logger.Warn().Err(err).Msg("retention sweep failed")
			}
		}
	}
}

// sweepOnce proposes Purge{now - Retention} when a stored result is older,
// and reports whether it did.
func (p *Processor) sweepOnce(ctx context.Context) (bool, error) {
	now := p.now()
	before := now.Add(-p.cfg.Retention).UnixMilli()
	var oldest int64
	var found bool
	if err := p.log.View(func(b *bolt.Bucket) error {
		oldest, found = results.Oldest(b)
		return nil
	}); err != nil {
		return false, fmt.Errorf("partition: sweep: %w", err)
	}
	if !found || oldest >= before {
		return false, nil
	}
	p.submit(ctx, purgeCmd(&rpc.Purge{BeforeUnixMs: before, ProposedAtUnixMs: now.UnixMilli()}), nil)
	return true, nil
}
