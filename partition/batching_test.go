package partition

import (
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/rs/zerolog"
)

// While the leader's last entry is unapplied, new commands wait and go
// together in one entry once it applies.
func TestHeldBatchGoesAsOneEntryAfterApply(t *testing.T) {
	var held atomic.Int64
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		parked(0, cfg)
		cfg.InFlightBatches = 1
		cfg.InFlightWait = time.Minute // only an apply releases the batch
		cfg.Knobs.BatchHeld = func(n int) { held.Store(int64(n)) }
	})
	c.setLeader(0, false)
	c.setHold(true)
	appendAsync := func(n int) chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := c.replicas[0].p.Append(ctxT(t), newInvoke("greeter", n))
			errc <- err
		}()
		return errc
	}
	first := appendAsync(0)
	testutil.WaitFor(t, 5*time.Second, "first entry appended", func() bool { return c.entryCount() == 1 })
	var rest []chan error
	for n := 1; n <= 3; n++ {
		rest = append(rest, appendAsync(n))
	}
	// The first command is held alone, then with the other two.
	testutil.WaitFor(t, 5*time.Second, "three commands held", func() bool { return held.Load() == 3 })
	if n := c.entryCount(); n != 1 {
		t.Fatalf("%d entries while the first is unapplied, want 1", n)
	}
	c.commitUpTo(1)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "held batch proposed", func() bool { return c.entryCount() == 2 })
	c.setHold(false)
	for _, errc := range rest {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// Later entries hold the invoker's outcomes of the parked deliveries.
	if got := c.commandsPerEntry(t, isInvoke); len(got) < 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("invokes per entry %v, want [1 3 ...]", got)
	}
}

// A held batch goes after InFlightWait even when nothing applies.
func TestHeldBatchGoesAfterInFlightWait(t *testing.T) {
	c := newFakeCluster(t, 1, func(_ int, cfg *Config) {
		parked(0, cfg)
		cfg.InFlightBatches = 1
		cfg.InFlightWait = 20 * time.Millisecond
	})
	c.setLeader(0, false)
	c.setHold(true)
	for n := range 3 {
		go func() { _, _ = c.replicas[0].p.Append(ctxT(t), newInvoke("greeter", n)) }()
		testutil.WaitFor(t, 5*time.Second, "entry appended with none applied", func() bool { return c.entryCount() == n+1 })
	}
	c.setHold(false)
	c.waitApplied()
}

func TestInFlightConfigValidated(t *testing.T) {
	for _, tc := range []struct {
		batches int
		wait    time.Duration
		ok      bool
	}{
		{1, 5 * time.Millisecond, true},
		{0, 0, true},  // the defaults
		{-1, 0, true}, // every batch at once
		{2, -time.Millisecond, false},
	} {
		cfg := testConfig(t)
		cfg.InFlightBatches, cfg.InFlightWait = tc.batches, tc.wait
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("InFlightBatches %d, InFlightWait %v: Validate = %v", tc.batches, tc.wait, err)
		}
	}
}

// TestZeroConfigTakesDefaults: beyond Partition and Services, a zero
// Config is DefaultConfig (the convention of docs/architecture.md).
func TestZeroConfigTakesDefaults(t *testing.T) {
	cfg := Config{Partition: 1, Services: staticServices{}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	want := DefaultConfig()
	want.Services = staticServices{}
	got := cfg.withDefaults()
	got.Logger, want.Logger = zerolog.Nop(), zerolog.Nop()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("zero config with defaults:\n%+v\nwant DefaultConfig:\n%+v", got, want)
	}
}
