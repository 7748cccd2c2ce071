package partition

import (
	"context"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/rpc"
	bolt "go.etcd.io/bbolt"
)

// completeN runs n invocations to completion on leader p.
func completeN(t *testing.T, p *Processor, n int) []*rpc.Invoke {
	t.Helper()
	invs := make([]*rpc.Invoke, n)
	for i := range invs {
		invs[i] = newInvoke("greeter", i)
		if _, err := p.Append(ctxT(t), invs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, inv := range invs {
		awaitOutput(t, p, inv.InvocationId)
	}
	return invs
}

// storedResults counts the results in a replica's state.
func storedResults(t *testing.T, r *replica) int {
	t.Helper()
	n := 0
	if err := r.View(context.Background(), func(b *bolt.Bucket) error {
		return b.Bucket([]byte("results")).ForEach(func(_, _ []byte) error { n++; return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// A backlog of expired results is purged PurgeLimit at a time, the
// sweeper proposing the next Purge as soon as one stopped at its limit,
// without waiting for its next SweepInterval.
func TestSweeperPurgesInBoundedBatches(t *testing.T) {
	clock := newManualClock()
	svc := newRecordingService(t)
	c := newFakeCluster(t, 2, func(_ int, cfg *Config) {
		cfg.Clock = clock.Now
		cfg.Services = svc.lookup("greeter")
		cfg.Retention = time.Hour
		cfg.SweepInterval = time.Hour // only the first sweep is by time (kicked below)
		cfg.PurgeLimit = 3
	})
	c.setLeader(0, false)
	p := c.replicas[0].p
	completeN(t, p, 10)
	clock.Advance(2 * time.Hour)
	p.sweepCh <- struct{}{} // the sweep a SweepInterval tick would start

	testutil.WaitFor(t, 10*time.Second, "every expired result purged", func() bool {
		c.waitApplied()
		return storedResults(t, c.replicas[0]) == 0 && storedResults(t, c.replicas[1]) == 0
	})
	limited := func(cmd *rpc.Command) bool { return cmd.GetPurge().GetLimit() == 3 }
	if n := c.countCommands(t, limited); n != 4 {
		t.Fatalf("%d Purge{limit 3} commands for 10 expired results; want 4", n)
	}
}
