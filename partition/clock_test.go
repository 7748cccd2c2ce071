package partition

import (
	"context"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
)

// skewedClock reads base shifted by skew: another node's clock.
func skewedClock(base *manualClock, skew time.Duration) func() time.Time {
	return func() time.Time { return base.Now().Add(skew) }
}

// A leader whose clock runs ten days ahead of the one that stamped the
// results does not purge them early: it purges by log time, the newest
// timestamp in the state when its term began plus the time it measured
// since.
func TestRetentionByLogTimeWithLeaderClockAhead(t *testing.T) {
	clock := newManualClock()
	svc := newRecordingService(t)
	c := newFakeCluster(t, 2, func(i int, cfg *Config) {
		cfg.Clock = clock.Now
		if i == 1 {
			cfg.Clock = skewedClock(clock, 10*24*time.Hour)
		}
		cfg.Services = svc.lookup("greeter")
		cfg.Retention = time.Hour
		cfg.SweepInterval = time.Hour // sweeps are called below
	})
	c.setLeader(0, false)
	completeN(t, c.replicas[0].p, 3)
	clock.Advance(30 * time.Minute)
	c.setLeader(1, false) // a new term: the fast clock leads
	c.waitApplied()
	p := c.replicas[1].p
	retention := p.retentionClock(context.Background(), c.rc.Group(1).Status().Term)
	start := clock.Now()

	// Log time is the results' completion when the term began (nothing
	// newer was stamped) plus what the leader measured since: the results
	// expire an hour after the term began, by its clock (late by the idle
	// half hour before, never early).
	for _, step := range []struct {
		advance time.Duration
		purge   bool
	}{{0, false}, {59 * time.Minute, false}, {2 * time.Minute, true}} {
		clock.Advance(step.advance)
		if proposed, err := p.sweepOnce(ctxT(t), retention); err != nil || proposed != step.purge {
			t.Fatalf("sweep %v into the term (leader's wall clock 10 days ahead) proposed %v, %v; want %v",
				clock.Now().Sub(start), proposed, err, step.purge)
		}
	}
	purge := func(cmd *rpc.Command) bool { return cmd.GetPurge() != nil }
	testutil.WaitFor(t, 10*time.Second, "the purge proposed", func() bool { return c.countCommands(t, purge) == 1 })
	c.waitApplied()
	if n := storedResults(t, c.replicas[0]); n != 0 {
		t.Fatalf("%d results left after the purge", n)
	}
}

// The proposer's clock alone decides whether a delayed exclusive send
// waits for an Admit: the leader stamps its not-before time from the
// delay, whatever the ingress's clock (which, for leaders older than the
// delay field, still sends a not-before of its own).
func TestDelayStampedByLeaderClock(t *testing.T) {
	clock := newManualClock()
	services := staticServices{"Counter": {Name: "Counter", Url: "http://127.0.0.1:1", Kind: rpc.Service_OBJECT}}
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = services
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	for _, tc := range []struct {
		name      string
		skew      time.Duration // of the ingress's clock
		delay     time.Duration
		scheduled bool
	}{
		{"delay 0, ingress a minute ahead", time.Minute, 0, false},
		{"delay 10s, ingress an hour behind", -time.Hour, 10 * time.Second, true},
	} {
		ingressClock := skewedClock(clock, tc.skew)
		id := invocation.RandomKeyed("Counter", tc.name)
		inv := &rpc.Invoke{InvocationId: id[:], RequestId: invocation.NewRequestID(), Service: "Counter", Handler: "add",
			Key: tc.name, Exclusive: true,
			DelayMs: proto.Int64(tc.delay.Milliseconds()), NotBeforeUnixMs: ingressClock().Add(tc.delay).UnixMilli()}
		a, err := p.Append(ctxT(t), inv)
		if err != nil {
			t.Fatal(err)
		}
		if want := clock.Now().Add(tc.delay).UnixMilli(); a.NotBeforeUnixMs != want {
			t.Errorf("%s: not before %d, want the leader's now + delay %d", tc.name, a.NotBeforeUnixMs, want)
		}
		rec, err := p.Status(ctxT(t), id[:])
		if err != nil {
			t.Fatal(err)
		}
		if scheduled := rec.State == rpc.InvocationRecord_SCHEDULED; scheduled != tc.scheduled {
			t.Errorf("%s: state %v, want scheduled %v", tc.name, rec.State, tc.scheduled)
		}
	}
}
