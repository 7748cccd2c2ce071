package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// Keyed targets. A schedule lives in the partition of its id; the run of a
// keyed target (Object/key/handler, Workflow/{tick}/run) must live in the
// partition of (service, key), where its key's queue is. So a tick's Apply
// does not create the run: it records it in the schedule (ScheduleState
// .dispatch) with its invocation id, a function of (schedule, tick) in the
// key's partition (invocation.ScheduledKeyedRun; a workflow run's id is
// the workflow's). The leader's dispatch loop appends each recorded run to
// its key's partition (Config.Dispatch) and, once accepted, proposes
// ScheduleDispatched, which removes it. A run appended twice (a retry, a
// new leader, an Append that was accepted but whose answer was lost) is
// one invocation: the key's partition accepts an id once. Exactly one
// invocation per tick therefore rests on the id, as for plain targets.

// Dispatch appends an invocation in the partition its id names, through
// that partition's leader wherever it is. Called from the leader's
// dispatch loop only; errors as for an ingress append (retried).
type Dispatch interface {
	Append(ctx context.Context, inv *rpc.Invoke) (*rpc.Appended, error)
}

// maxScheduleDispatch bounds a schedule's keyed runs waiting for their
// key's partition; ticks past it are skipped (and counted).
const maxScheduleDispatch = 100

// tickPlaceholder in a keyed target's key is replaced by the tick's time.
const tickPlaceholder = "{tick}"

// keyedRun records st's keyed run for tick (st is changed, not stored);
// false when that run is recorded already or the bound is reached.
func keyedRun(st *rpc.ScheduleState, tick int64, nonce []byte, at int64, fx *effects) ([]byte, bool) {
	spec := st.Spec
	key := strings.ReplaceAll(spec.Key, tickPlaceholder, time.UnixMilli(tick).UTC().Format(time.RFC3339Nano))
	id := invocation.ScheduledKeyedRun(spec.Id, tick, nonce, spec.Service, key)
	if spec.WorkflowRun {
		id = invocation.WorkflowRun(spec.Service, key)
	}
	for _, d := range st.Dispatch {
		if bytes.Equal(d.InvocationId, id[:]) {
			return id[:], false
		}
	}
	if len(st.Dispatch) >= maxScheduleDispatch {
		st.Skipped++
		fx.ticksSkipped++
		return id[:], false
	}
	st.Dispatch = append(st.Dispatch, &rpc.ScheduleDispatch{TickUnixMs: tick, InvocationId: id[:], Key: key, AtUnixMs: at})
	st.Runs++
	return id[:], true
}

// scheduleDispatched applies ScheduleDispatched: the run is no longer
// handed over; a dropped one is counted as skipped, not run.
func scheduleDispatched(b *bolt.Bucket, c *rpc.ScheduleDispatched, fx *effects) error {
	st, err := getSchedule(b, c.Id)
	if err != nil || st == nil {
		return err
	}
	for i, d := range st.Dispatch {
		if !bytes.Equal(d.InvocationId, c.InvocationId) {
			continue
		}
		st.Dispatch = append(st.Dispatch[:i], st.Dispatch[i+1:]...)
		if c.Dropped {
			st.Runs--
			st.Skipped++
			fx.ticksSkipped++
		}
		return putSchedule(b, st)
	}
	return nil
}

// dispatchTimeout bounds one Append to a key's partition.
const dispatchTimeout = 5 * time.Second

// dispatchLoop is the leader's loop that hands keyed runs to their key's
// partition, retrying each until it is accepted.
func (p *Processor) dispatchLoop(ctx context.Context) {
	if p.cfg.Dispatch == nil {
		return
	}
	for p.log.ReadIndex(ctx) != nil {
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
	proposed := make(map[string]time.Time) // invocation id -> ScheduleDispatched proposed at
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(p.dispatchRuns(ctx, proposed))
		select {
		case <-ctx.Done():
			return
		case <-p.dispatchCh:
		case <-timer.C:
		}
	}
}

// dispatchRuns appends every recorded keyed run and returns how long to
// wait before looking again.
func (p *Processor) dispatchRuns(ctx context.Context, proposed map[string]time.Time) time.Duration {
	var states []*rpc.ScheduleState
	if err := p.log.View(ctx, func(b *bolt.Bucket) error {
		return scanSchedules(b, func(st *rpc.ScheduleState) {
			if len(st.Dispatch) > 0 {
				states = append(states, st)
			}
		})
	}); err != nil {
		p.logger.Warn().Err(err).Msg("schedule dispatch: reading schedules failed")
		return time.Second
	}
	wait, now := schedulerRecheck, p.now()
	pending := make(map[string]bool)
	for _, st := range states {
		for _, d := range st.Dispatch {
			k := string(d.InvocationId)
			pending[k] = true
			if at, ok := proposed[k]; ok && now.Sub(at) < tickRetry {
				wait = min(wait, tickRetry-now.Sub(at))
				continue
			}
			dropped, err := p.dispatchRun(ctx, st.Spec, d)
			if err != nil {
				if ctx.Err() == nil {
					p.logger.Warn().Err(err).Str("schedule", st.Spec.Id).Msg("schedule dispatch: run not accepted yet, retrying")
				}
				wait = min(wait, time.Second)
				continue
			}
			proposed[k] = now
			p.submit(ctx, &rpc.Command{Cmd: &rpc.Command_ScheduleDispatched{ScheduleDispatched: &rpc.ScheduleDispatched{
				Id: st.Spec.Id, InvocationId: d.InvocationId, Dropped: dropped,
			}}}, nil)
			wait = min(wait, tickRetry)
		}
	}
	for k := range proposed {
		if !pending[k] {
			delete(proposed, k)
		}
	}
	return max(wait, time.Millisecond)
}

// dispatchRun appends run d of spec to its key's partition; dropped when
// it never can be (its service is no longer registered, or the append is
// refused as malformed).
func (p *Processor) dispatchRun(ctx context.Context, spec *rpc.ScheduleSpec, d *rpc.ScheduleDispatch) (dropped bool, err error) {
	svc, err := p.cfg.Services.Lookup(ctx, spec.Service)
	switch {
	case errors.Is(err, rpc.ErrNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("look up %s: %w", spec.Service, err)
	}
	inv := &rpc.Invoke{
		InvocationId:           d.InvocationId,
		RequestId:              d.InvocationId[8:],
		Service:                spec.Service,
		Handler:                spec.Handler,
		Body:                   spec.Body,
		ContentType:            spec.ContentType,
		Key:                    d.Key,
		Exclusive:              registry.Exclusive(svc, spec.Handler),
		ServiceRegisteredIndex: svc.RegisteredIndex,
		ScheduleId:             spec.Id,
		ScheduledAtUnixMs:      d.TickUnixMs,
	}
	actx, cancel := context.WithTimeout(ctx, dispatchTimeout)
	defer cancel()
	_, err = p.cfg.Dispatch.Append(actx, inv)
	if errors.Is(err, rpc.ErrInvalid) {
		p.logger.Error().Err(err).Str("schedule", spec.Id).Msg("schedule dispatch: run refused by its key's partition, dropped")
		return true, nil
	}
	return false, err
}
