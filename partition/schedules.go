package partition

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	"github.com/raftgate/raftgate/schedule"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// schedulesBucket: schedule id → marshalled rpc.ScheduleState. Created by
// the first schedule command, so state without schedules is unchanged.
var schedulesBucket = []byte("schedules")

// Headers of a schedule's run (docs/api.md, "Schedules").
const (
	headerSchedule      = "X-Raftgate-Schedule"
	headerScheduledTime = "X-Raftgate-Scheduled-Time"
)

// maxScheduleIDLen bounds schedule ids (they are bbolt keys and headers).
const maxScheduleIDLen = 200

func getSchedule(b *bolt.Bucket, id string) (*rpc.ScheduleState, error) {
	sb := b.Bucket(schedulesBucket)
	if sb == nil {
		return nil, nil
	}
	data := sb.Get([]byte(id))
	if data == nil {
		return nil, nil
	}
	st := &rpc.ScheduleState{}
	if err := proto.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("partition: schedule %q: %w", id, err)
	}
	return st, nil
}

func putSchedule(b *bolt.Bucket, st *rpc.ScheduleState) error {
	sb, err := b.CreateBucketIfNotExists(schedulesBucket)
	if err != nil {
		return fmt.Errorf("partition: schedules bucket: %w", err)
	}
	data, err := marshalOpts.Marshal(st)
	if err != nil {
		return fmt.Errorf("partition: marshal schedule: %w", err)
	}
	return sb.Put([]byte(st.Spec.Id), data)
}

// applySchedule applies the schedule commands. Replies carry the run a
// trigger started in InvocationId.
func (m *machine) applySchedule(b *bolt.Bucket, term uint64, c *rpc.Command, fx *effects) error {
	fx.schedulesChanged = true
	switch cmd := c.Cmd.(type) {
	case *rpc.Command_PutSchedule:
		return m.putSchedule(b, term, cmd.PutSchedule, fx)
	case *rpc.Command_DeleteSchedule:
		r := reply{requestID: cmd.DeleteSchedule.RequestId, term: term, appended: &rpc.Appended{}}
		sb := b.Bucket(schedulesBucket)
		if sb == nil || sb.Get([]byte(cmd.DeleteSchedule.Id)) == nil {
			r.appended, r.err = nil, fmt.Errorf("partition: schedule %q: %w", cmd.DeleteSchedule.Id, rpc.ErrNotFound)
		} else if err := sb.Delete([]byte(cmd.DeleteSchedule.Id)); err != nil {
			return fmt.Errorf("partition: delete schedule: %w", err)
		}
		fx.replies = append(fx.replies, r)
		return nil
	case *rpc.Command_PauseSchedule:
		c := cmd.PauseSchedule
		return m.withSchedule(b, term, c.Id, c.RequestId, fx, func(st *rpc.ScheduleState, r *reply) error {
			if c.Paused == st.Spec.Paused {
				return nil
			}
			st.Spec.Paused = c.Paused
			if !c.Paused {
				st.NextTickUnixMs = c.NextTickUnixMs // what was due while paused is not caught up
			}
			st.UpdatedAtUnixMs = c.ProposedAtUnixMs
			return putSchedule(b, st)
		})
	case *rpc.Command_TriggerSchedule:
		c := cmd.TriggerSchedule
		return m.withSchedule(b, term, c.Id, c.RequestId, fx, func(st *rpc.ScheduleState, r *reply) error {
			id, err := m.startRun(b, st, c.ProposedAtUnixMs, c.RequestId, c.ProposedAtUnixMs, fx)
			r.appended.InvocationId = id
			if err != nil {
				return err
			}
			return putSchedule(b, st)
		})
	case *rpc.Command_ScheduleTick:
		return m.scheduleTick(b, cmd.ScheduleTick, fx)
	case *rpc.Command_ScheduleDispatched:
		return scheduleDispatched(b, cmd.ScheduleDispatched, fx)
	case *rpc.Command_BackfillSchedule:
		c := cmd.BackfillSchedule
		return m.withSchedule(b, term, c.Id, c.RequestId, fx, func(st *rpc.ScheduleState, r *reply) error {
			for _, tick := range c.TicksUnixMs {
				id, started, err := m.newRun(b, st, tick, nil, c.ProposedAtUnixMs, fx)
				if err != nil {
					return err
				}
				if started {
					r.appended.Started++
				}
				if tick > st.LastTickUnixMs {
					st.LastTickUnixMs, st.LastInvocationId = tick, id
				}
			}
			return putSchedule(b, st)
		})
	}
	return fmt.Errorf("partition: unexpected schedule command %T", c.Cmd)
}

// withSchedule runs fn on the stored schedule id and replies to the
// request; rpc.ErrNotFound when there is none.
func (m *machine) withSchedule(b *bolt.Bucket, term uint64, id string, requestID []byte, fx *effects, fn func(*rpc.ScheduleState, *reply) error) error {
	r := reply{requestID: requestID, term: term, appended: &rpc.Appended{}}
	st, err := getSchedule(b, id)
	switch {
	case err != nil:
		return err
	case st == nil:
		r.appended, r.err = nil, fmt.Errorf("partition: schedule %q: %w", id, rpc.ErrNotFound)
	default:
		if err := fn(st, &r); err != nil {
			return err
		}
	}
	fx.replies = append(fx.replies, r)
	return nil
}

// putSchedule creates or replaces a schedule; a replaced one keeps its
// history (runs, skipped, last run, the run under way) and takes the new
// spec and next tick.
func (m *machine) putSchedule(b *bolt.Bucket, term uint64, c *rpc.PutSchedule, fx *effects) error {
	r := reply{requestID: c.RequestId, term: term, appended: &rpc.Appended{}}
	spec := c.Spec
	if spec == nil || spec.Id == "" || len(spec.Id) > maxScheduleIDLen || spec.Service == "" || spec.Handler == "" {
		r.appended, r.err = nil, fmt.Errorf("partition: malformed schedule: %w", rpc.ErrInvalid)
		fx.replies = append(fx.replies, r)
		return nil
	}
	st, err := getSchedule(b, spec.Id)
	if err != nil {
		return err
	}
	if st == nil {
		st = &rpc.ScheduleState{CreatedAtUnixMs: c.ProposedAtUnixMs}
	}
	st.Spec = spec
	st.NextTickUnixMs = c.NextTickUnixMs
	st.UpdatedAtUnixMs = c.ProposedAtUnixMs
	if err := putSchedule(b, st); err != nil {
		return err
	}
	fx.replies = append(fx.replies, r)
	return nil
}

// scheduleTick applies a leader's tick: only while the schedule's next
// tick is the one the leader read (so a tick proposed twice, by an old and
// a new leader or by one leader retrying, applies once), and the run's id
// is a function of (schedule, tick) besides.
func (m *machine) scheduleTick(b *bolt.Bucket, c *rpc.ScheduleTick, fx *effects) error {
	st, err := getSchedule(b, c.Id)
	if err != nil || st == nil || st.Spec.Paused || st.NextTickUnixMs != c.FromUnixMs {
		return err
	}
	st.Skipped += c.Skipped
	fx.ticksSkipped += c.Skipped
	fire, next := c.FireUnixMs, c.NextTickUnixMs
	if end := st.Spec.EndUnixMs; end != 0 {
		// A tick planned before a replaced spec moved the end earlier.
		fire, next = zeroAfter(fire, end), zeroAfter(next, end)
	}
	if fire != 0 {
		overlap, _ := schedule.ParseOverlap(st.Spec.Overlap) // checked when put; unknown reads as skip
		switch overlap.Decide(len(st.Running) > 0, st.BufferedTickUnixMs != 0) {
		case schedule.Start:
			if _, err := m.startRun(b, st, fire, nil, c.ProposedAtUnixMs, fx); err != nil {
				return err
			}
		case schedule.Buffer:
			st.BufferedTickUnixMs = fire
		case schedule.Drop:
			st.Skipped++
			fx.ticksSkipped++
		}
	}
	st.NextTickUnixMs = next
	return putSchedule(b, st)
}

func zeroAfter(ms, end int64) int64 {
	if ms > end {
		return 0
	}
	return ms
}

// startRun starts st's run for tick (see newRun), the one the overlap
// policy then waits for (st is changed, not stored).
func (m *machine) startRun(b *bolt.Bucket, st *rpc.ScheduleState, tick int64, nonce []byte, at int64, fx *effects) ([]byte, error) {
	id, started, err := m.newRun(b, st, tick, nonce, at, fx)
	if err != nil {
		return nil, err
	}
	st.LastTickUnixMs = tick
	st.LastInvocationId = id
	if started && st.Spec.Key == "" {
		st.Running = id // a keyed run completes in its key's partition: not waited for
	}
	return id, nil
}

// newRun records the invocation of st's run for tick and queues its
// delivery, counting it in st.Runs. The run's id derives from (schedule,
// tick, nonce); one that exists already is not started again (false).
func (m *machine) newRun(b *bolt.Bucket, st *rpc.ScheduleState, tick int64, nonce []byte, at int64, fx *effects) ([]byte, bool, error) {
	if st.Spec.Key != "" {
		id, started := keyedRun(st, tick, nonce, at, fx)
		return id, started, nil
	}
	id := invocation.ScheduledRun(st.Spec.Id, tick, nonce)
	idb := id[:]
	_, found, err := m.record(b, idb)
	if err != nil || found {
		return idb, false, err
	}
	inv := &rpc.Invoke{
		InvocationId:      idb,
		RequestId:         idb[8:],
		Service:           st.Spec.Service,
		Handler:           st.Spec.Handler,
		Body:              st.Spec.Body,
		ContentType:       st.Spec.ContentType,
		ProposedAtUnixMs:  at,
		ScheduleId:        st.Spec.Id,
		ScheduledAtUnixMs: tick,
	}
	rec := &rpc.InvocationRecord{Invoke: inv, State: rpc.InvocationRecord_PENDING, AcceptedAtUnixMs: at}
	if err := m.startDelivery(b, rec, fx); err != nil {
		return nil, false, err
	}
	if err := indexCreated(b, rec); err != nil {
		return nil, false, err
	}
	fx.accepted++
	st.Runs++
	return idb, true, nil
}

// scheduleRunDone is finish's part for a schedule's run: the run under way
// ended, so a buffered tick starts now (at, the completion's time).
func (m *machine) scheduleRunDone(b *bolt.Bucket, rec *rpc.InvocationRecord, at int64, fx *effects) error {
	st, err := getSchedule(b, rec.Invoke.ScheduleId)
	if err != nil || st == nil || !bytes.Equal(st.Running, rec.Invoke.InvocationId) {
		return err
	}
	fx.schedulesChanged = true
	st.Running = nil
	if tick := st.BufferedTickUnixMs; tick != 0 && !st.Spec.Paused {
		st.BufferedTickUnixMs = 0
		if _, err := m.startRun(b, st, tick, nil, at, fx); err != nil {
			return err
		}
	}
	return putSchedule(b, st)
}

// scheduleHeaders are the headers of a schedule's run, nil for other
// invocations.
func scheduleHeaders(inv *rpc.Invoke) (id, at string) {
	if inv.ScheduleId == "" {
		return "", ""
	}
	return inv.ScheduleId, time.UnixMilli(inv.ScheduledAtUnixMs).UTC().Format(time.RFC3339Nano)
}

// Schedule serves an admin request about schedules at the leader: changes
// through the log (returning once applied), reads after a ReadIndex.
func (p *Processor) Schedule(ctx context.Context, req *rpc.ScheduleRequest) (*rpc.ScheduleList, error) {
	now := p.now()
	var id string
	var requestID []byte
	var cmd *rpc.Command
	switch op := req.GetOp().(type) {
	case *rpc.ScheduleRequest_Get:
		return p.readSchedules(ctx, op.Get)
	case *rpc.ScheduleRequest_List:
		return p.readSchedules(ctx, "")
	case *rpc.ScheduleRequest_Put:
		c := proto.Clone(op.Put).(*rpc.PutSchedule)
		s, err := parseSpec(c.GetSpec())
		if err != nil {
			return nil, err
		}
		c.ProposedAtUnixMs = now.UnixMilli()
		c.NextTickUnixMs = tickMs(s.Next(now))
		id, requestID, cmd = c.GetSpec().GetId(), c.RequestId, &rpc.Command{Cmd: &rpc.Command_PutSchedule{PutSchedule: c}}
	case *rpc.ScheduleRequest_Delete:
		c := op.Delete
		id, requestID, cmd = c.Id, c.RequestId, &rpc.Command{Cmd: &rpc.Command_DeleteSchedule{DeleteSchedule: c}}
	case *rpc.ScheduleRequest_Pause:
		c := proto.Clone(op.Pause).(*rpc.PauseSchedule)
		c.ProposedAtUnixMs = now.UnixMilli()
		if !c.Paused {
			next, err := p.nextAfter(ctx, c.Id, now)
			if err != nil {
				return nil, err
			}
			c.NextTickUnixMs = next
		}
		id, requestID, cmd = c.Id, c.RequestId, &rpc.Command{Cmd: &rpc.Command_PauseSchedule{PauseSchedule: c}}
	case *rpc.ScheduleRequest_Trigger:
		c := proto.Clone(op.Trigger).(*rpc.TriggerSchedule)
		c.ProposedAtUnixMs = now.UnixMilli()
		id, requestID, cmd = c.Id, c.RequestId, &rpc.Command{Cmd: &rpc.Command_TriggerSchedule{TriggerSchedule: c}}
	case *rpc.ScheduleRequest_Backfill:
		c := proto.Clone(op.Backfill).(*rpc.BackfillSchedule)
		c.ProposedAtUnixMs = now.UnixMilli()
		if err := p.backfillTicks(ctx, c, now); err != nil {
			return nil, err
		}
		id, requestID, cmd = c.Id, c.RequestId, &rpc.Command{Cmd: &rpc.Command_BackfillSchedule{BackfillSchedule: c}}
	default:
		return nil, fmt.Errorf("partition: empty schedule request: %w", rpc.ErrInvalid)
	}
	if len(requestID) == 0 || len(requestID) > maxRequestIDLen || id == "" {
		return nil, fmt.Errorf("partition: schedule request needs an id and a request id: %w", rpc.ErrInvalid)
	}
	a, err := p.request(ctx, requestID, cmd)
	if err != nil {
		return nil, err
	}
	if _, ok := req.GetOp().(*rpc.ScheduleRequest_Delete); ok {
		return &rpc.ScheduleList{}, nil
	}
	list, err := p.readSchedules(ctx, id)
	if err != nil {
		return nil, err
	}
	list.Triggered = a.GetInvocationId()
	if c, ok := cmd.Cmd.(*rpc.Command_BackfillSchedule); ok {
		list.BackfillTicks, list.BackfillStarted = uint64(len(c.BackfillSchedule.TicksUnixMs)), a.GetStarted()
	}
	return list, nil
}

// MaxBackfillTicks bounds the ticks of one backfill (one log entry, one
// run each).
const MaxBackfillTicks = 1000

// backfillTicks stamps c with the ticks of the stored schedule in its
// range, which must be past at now.
func (p *Processor) backfillTicks(ctx context.Context, c *rpc.BackfillSchedule, now time.Time) error {
	from, to := time.UnixMilli(c.FromUnixMs), time.UnixMilli(c.ToUnixMs)
	switch {
	case c.FromUnixMs == 0 || c.ToUnixMs == 0 || to.Before(from):
		return fmt.Errorf("partition: backfill needs a range, from before to: %w", rpc.ErrInvalid)
	case to.After(now):
		return fmt.Errorf("partition: backfill up to %s: the range must be past (the schedule runs what is to come): %w",
			to.UTC().Format(time.RFC3339), rpc.ErrInvalid)
	}
	list, err := p.readSchedules(ctx, c.Id)
	if err != nil {
		return err
	}
	s, err := parseSpec(list.Schedules[0].Spec)
	if err != nil {
		return err
	}
	ticks, err := s.Between(from, to, MaxBackfillTicks)
	if err != nil {
		return fmt.Errorf("partition: backfill: %w, give a shorter range: %w", err, rpc.ErrInvalid)
	}
	c.TicksUnixMs = make([]int64, len(ticks))
	for i, t := range ticks {
		c.TicksUnixMs[i] = t.UnixMilli()
	}
	return nil
}

// nextAfter is the next tick of the stored schedule id after now.
func (p *Processor) nextAfter(ctx context.Context, id string, now time.Time) (int64, error) {
	list, err := p.readSchedules(ctx, id)
	if err != nil {
		return 0, err
	}
	s, err := parseSpec(list.Schedules[0].Spec)
	if err != nil {
		return 0, err
	}
	return tickMs(s.Next(now)), nil
}

// readSchedules reads schedule id (every schedule when id is empty, in id
// order) at the leader.
func (p *Processor) readSchedules(ctx context.Context, id string) (*rpc.ScheduleList, error) {
	if err := p.leaderRead(ctx); err != nil {
		return nil, err
	}
	list := &rpc.ScheduleList{}
	err := p.log.ViewCheckpoint(ctx, func(b *bolt.Bucket) error { // every schedule: beside the applier
		if id != "" {
			st, err := getSchedule(b, id)
			if st != nil {
				list.Schedules = append(list.Schedules, st)
			}
			return err
		}
		return scanSchedules(b, func(st *rpc.ScheduleState) { list.Schedules = append(list.Schedules, st) })
	})
	if err != nil {
		return nil, fmt.Errorf("partition: schedules: %w", err)
	}
	if id != "" && len(list.Schedules) == 0 {
		return nil, fmt.Errorf("partition: schedule %q: %w", id, rpc.ErrNotFound)
	}
	return list, nil
}

func scanSchedules(b *bolt.Bucket, fn func(*rpc.ScheduleState)) error {
	sb := b.Bucket(schedulesBucket)
	if sb == nil {
		return nil
	}
	return sb.ForEach(func(k, v []byte) error {
		st := &rpc.ScheduleState{}
		if err := proto.Unmarshal(v, st); err != nil {
			return fmt.Errorf("schedule %q: %w", k, err)
		}
		fn(st)
		return nil
	})
}

// parseSpec parses a stored or proposed spec; rpc.ErrInvalid names what is
// wrong.
func parseSpec(spec *rpc.ScheduleSpec) (*schedule.Schedule, error) {
	if spec == nil {
		return nil, fmt.Errorf("partition: no schedule spec: %w", rpc.ErrInvalid)
	}
	if _, err := schedule.ParseOverlap(spec.Overlap); err != nil {
		return nil, fmt.Errorf("%w: %w", rpc.ErrInvalid, err)
	}
	s, err := schedule.Parse(schedule.Spec{Every: time.Duration(spec.EveryMs) * time.Millisecond, Repeat: spec.Repeat,
		Cron: spec.Cron, TimeZone: spec.TimeZone, Start: msTime(spec.StartUnixMs), End: msTime(spec.EndUnixMs)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", rpc.ErrInvalid, err)
	}
	return s, nil
}

// msTime is the time at unix ms, the zero time for 0 (unbounded).
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// tickMs is t in unix ms, 0 for the zero time (no next tick).
func tickMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// scheduler is the leader's loop that fires due ticks: it reads the
// schedules, proposes a ScheduleTick for each due one (skipping what is
// older than its catch-up window) and sleeps until the next is due or a
// schedule command applies. What it proposes is checked again in Apply
// (ScheduleTick.from), so a proposal that is repeated, or races with
// another leader's, changes nothing.
type scheduler struct {
	p *Processor
	// proposed remembers the tick each schedule was last proposed from,
	// and when, so that the loop does not propose it again while it is in
	// flight (it does after tickRetry, in case it was dropped).
	proposed map[string]proposedTick
}

type proposedTick struct {
	from int64
	at   time.Time
}

// tickRetry is how long a proposed tick may stay unapplied before the
// leader proposes it again.
const tickRetry = 2 * time.Second

// schedulerRecheck bounds the scheduler's sleep.
const schedulerRecheck = 5 * time.Second

func (p *Processor) scheduleLoop(ctx context.Context) {
	s := &scheduler{p: p, proposed: make(map[string]proposedTick)}
	for p.log.ReadIndex(ctx) != nil { // start from what earlier leaders committed
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(s.fire(ctx))
		select {
		case <-ctx.Done():
			return
		case <-p.scheduleCh:
		case <-timer.C:
		}
	}
}

// fire proposes every due tick and returns how long to wait for the next.
func (s *scheduler) fire(ctx context.Context) time.Duration {
	var states []*rpc.ScheduleState
	if err := s.p.log.View(ctx, func(b *bolt.Bucket) error {
		return scanSchedules(b, func(st *rpc.ScheduleState) { states = append(states, st) })
	}); err != nil {
		s.p.logger.Warn().Err(err).Msg("scheduler: reading schedules failed")
		return time.Second
	}
	now := s.p.now()
	wait := schedulerRecheck
	seen := make(map[string]bool, len(states))
	for _, st := range states {
		id := st.Spec.Id
		seen[id] = true
		if st.Spec.Paused || st.NextTickUnixMs == 0 {
			continue
		}
		sched, err := parseSpec(st.Spec)
		if err != nil {
			s.p.logger.Warn().Err(err).Str("schedule", id).Msg("scheduler: cannot evaluate schedule")
			continue
		}
		jitter := time.Duration(st.Spec.JitterMs) * time.Millisecond
		next := time.UnixMilli(st.NextTickUnixMs)
		plan, due := sched.Catchup(id, next, now, time.Duration(st.Spec.CatchupWindowMs)*time.Millisecond, jitter)
		if !due {
			wait = min(wait, schedule.Due(id, next, jitter).Sub(now))
			continue
		}
		if pt, ok := s.proposed[id]; ok && pt.from == st.NextTickUnixMs && now.Sub(pt.at) < tickRetry {
			wait = min(wait, tickRetry-now.Sub(pt.at))
			continue
		}
		s.proposed[id] = proposedTick{from: st.NextTickUnixMs, at: now}
		s.p.submit(ctx, &rpc.Command{Cmd: &rpc.Command_ScheduleTick{ScheduleTick: &rpc.ScheduleTick{
			Id: id, FromUnixMs: st.NextTickUnixMs, FireUnixMs: tickMs(plan.Fire), Skipped: plan.Skipped,
			NextTickUnixMs: tickMs(plan.Next), ProposedAtUnixMs: now.UnixMilli(),
		}}}, nil)
	}
	for id := range s.proposed {
		if !seen[id] {
			delete(s.proposed, id)
		}
	}
	return max(wait, time.Millisecond)
}

// wakeScheduler makes the scheduler, and the dispatch of keyed runs, read
// the schedules again now.
func (p *Processor) wakeScheduler() {
	for _, ch := range []chan struct{}{p.scheduleCh, p.dispatchCh} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
