package partition

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raftgate/raftgate/proposals"
	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// proposeLoop drains the queue into one CommandBatch per log entry: while
// one Propose is under way the next batch fills, so concurrent requests
// share entries (the state machine is CPU-bound per entry, not per command).
// Once cfg.InFlightBatches of its entries are proposed and not yet applied,
// it holds the next batch, which keeps filling, until an apply catches up
// or cfg.InFlightWait has passed.
func (p *Processor) proposeLoop() {
	batch := make([]proposal, 0, p.cfg.MaxBatchCommands)
	defer p.drainQueue()
	holdTimer := time.NewTimer(time.Hour)
	holdTimer.Stop()
	var lastProposed uint64 // index of this loop's last proposed entry
	for {
		batch = batch[:0]
		select {
		case <-p.stop:
			return
		case q := <-p.queue:
			batch = append(batch, q)
		}
		size := proto.Size(batch[0].cmd)
		roomy := func() bool { return len(batch) < p.cfg.MaxBatchCommands && size < p.cfg.MaxBatchBytes }
	fill:
		for roomy() {
			select {
			case q := <-p.queue:
				batch = append(batch, q)
				size += proto.Size(q.cmd)
			default:
				break fill
			}
		}
		if p.mustHold(lastProposed) && roomy() {
			holdTimer.Reset(p.cfg.InFlightWait)
			p.knobBatchHeld(len(batch))
		hold:
			for p.mustHold(lastProposed) && roomy() {
				select {
				case q := <-p.queue:
					batch = append(batch, q)
					size += proto.Size(q.cmd)
					p.knobBatchHeld(len(batch))
				case <-p.appliedCh:
				case <-holdTimer.C:
					break hold
				case <-p.stop:
					holdTimer.Stop()
					dropUntracked(batch)
					return
				}
			}
			holdTimer.Stop()
		}
		if idx := p.proposeBatch(batch); idx > 0 {
			lastProposed = idx
		}
	}
}

func (p *Processor) knobBatchHeld(n int) {
	if k := p.cfg.Knobs; k != nil && k.BatchHeld != nil {
		k.BatchHeld(n)
	}
}

// mustHold says whether cfg.InFlightBatches of the entries up to
// lastProposed are still unapplied.
func (p *Processor) mustHold(lastProposed uint64) bool {
	k := p.cfg.InFlightBatches
	return k > 0 && lastProposed >= p.appliedIndex.Load()+uint64(k)
}

// drainQueue tells what is still queued at Close that it was not proposed
// (tracked waiters were already failed by Close).
func (p *Processor) drainQueue() {
	for {
		select {
		case q := <-p.queue:
			dropUntracked([]proposal{q})
		default:
			return
		}
	}
}

// dropUntracked tells the untracked commands of batch that they were not
// proposed (tracked waiters learn it from the tracker).
func dropUntracked(batch []proposal) {
	for _, q := range batch {
		if q.done != nil {
			q.done(rpc.ErrLostLeadership)
		}
	}
}

// proposeBatch proposes batch as one entry and returns its index, 0 if it
// was not proposed.
func (p *Processor) proposeBatch(batch []proposal) uint64 {
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
		return 0
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
		return 0
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
			return 0
		}
		fail(p.mapLogError(err))
		return 0
	}
	p.metrics.proposed(len(cmds))
	p.tracker.Proposed(tks, prop.Term)
	for _, q := range untracked {
		if q.done != nil {
			q.done(nil)
		}
	}
	return prop.Index
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
				p.leaderWork(ctx, term)
			}()
		}
	}
}

func (p *Processor) leaderWork(ctx context.Context, term uint64) {
	var wg sync.WaitGroup
	wg.Go(func() { p.invoker.run(ctx) })
	wg.Go(func() { p.sweepLoop(ctx, term) })
	wg.Go(func() { p.bulkLoop(ctx) })
	wg.Go(func() { p.scheduleLoop(ctx) })
	wg.Go(func() { p.dispatchLoop(ctx) })
	wg.Go(func() { p.callbacks.run(ctx) })
	wg.Wait()
}
