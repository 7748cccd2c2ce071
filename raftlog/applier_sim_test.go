package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
)

// simSM is a deterministic state machine for the applier simulation: each
// entry's data is stored under its index; an entry "poison" fails Apply
// (a bug, fixed before the next restart). It counts the effects that ran
// per index.
type simSM struct {
	effects map[uint64]int
}

var errPoison = errors.New("simSM: poison")

func (s *simSM) Apply(b *bolt.Bucket, ents []Entry) (Applied, error) {
	idx := make([]uint64, 0, len(ents))
	for _, e := range ents {
		if string(e.Data) == "poison" {
			return Applied{}, errPoison
		}
		if err := b.Put(binary.BigEndian.AppendUint64(nil, e.Index), append([]byte(nil), e.Data...)); err != nil {
			return Applied{}, err
		}
		idx = append(idx, e.Index)
	}
	return Applied{Acknowledge: func() {
		for _, i := range idx {
			s.effects[i]++
		}
	}}, nil
}

func (s *simSM) Restore(*bolt.Bucket) error { return nil }

// simGroup is one group of the simulation: its log (what raft would hand
// out for apply) and how far it was handed to the applier.
type simGroup struct {
	g      *Group
	sm     *simSM
	log    []string // log[i] is the data of index i+2 (index 1 is bootstrap)
	handed uint64   // last index handed to the applier
}

// TestApplierSimulation drives the applier single-threaded, with an
// injected clock, through a seeded schedule: three groups append and hand
// entries to apply at random, readers view state between them, one group
// may hit an entry whose Apply fails (the applier stops: every request of
// that step and after fails, and no effect of the step runs; the bug is
// fixed and the node restarts), and the power may be cut (the open
// transaction lost; the groups restart from their checkpoints and the log
// replays past them). It checks that every request is answered in the step
// it was queued in (batching never makes a group wait for another beyond
// one step), that no effect runs twice between restarts, that views see
// every applied entry, and that in the end each group's state is exactly
// its log. A failure names the seed: RAFTLOG_SEED=… replays the same
// schedule.
func TestApplierSimulation(t *testing.T) {
	base := testSeed(t)
	for i := range uint64(8) {
		simulateApplier(t, base+i)
	}
}

func simulateApplier(t *testing.T, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	db, err := bolt.Open(filepath.Join(t.TempDir(), stateFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := newMetrics(nil, nil, nil)
	now := time.Unix(1_700_000_000, 0)
	policy := checkpointPolicy{interval: 30 * time.Millisecond, entries: 40}
	var broken error
	newAp := func() *applier {
		return newApplierState(db, zerolog.Nop(), m, nil, policy, func(err error) { broken = err }, now)
	}
	a := newAp()
	defer func() {
		if a.tx != nil {
			_ = a.tx.Rollback()
		}
	}()
	groups := make([]*simGroup, 3)
	poisoned := rng.IntN(2) == 0
	for i := range groups {
		id := GroupID(i + 1)
		sg := &simGroup{sm: &simSM{effects: map[uint64]int{}}, handed: initialIndex}
		sg.g = &Group{id: id, sm: sg.sm, wake: make(chan struct{}, 1)}
		if err := db.Update(func(tx *bolt.Tx) error { return createGroupState(tx, id, []uint64{1}, 0) }); err != nil {
			t.Fatal(err)
		}
		groups[i] = sg
	}
	// restart cuts the power: the open transaction is lost; each group
	// starts again from its checkpointed applied index.
	restart := func() {
		if a.tx != nil {
			_ = a.tx.Rollback()
		}
		a = newAp()
		err := db.View(func(tx *bolt.Tx) error {
			for _, sg := range groups {
				gb, err := openGroupBuckets(tx, sg.g.id)
				if err != nil {
					return err
				}
				gs, err := readGroupState(gb)
				if err != nil {
					return err
				}
				sg.handed = gs.appliedIdx
				sg.sm.effects = map[uint64]int{}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for stepNo := range 300 {
		now = now.Add(time.Duration(rng.IntN(15)) * time.Millisecond)
		handedBefore := map[*simGroup]uint64{}
		for _, sg := range groups {
			handedBefore[sg] = sg.handed
		}
		var batch []*applyReq
		for _, sg := range groups {
			// Raft appends, then hands out a prefix of what is committed.
			for range rng.IntN(3) {
				data := fmt.Sprintf("g%d-%d", sg.g.id, len(sg.log))
				if poisoned && sg.g.id == 2 && len(sg.log) == 50 {
					data = "poison"
				}
				sg.log = append(sg.log, data)
			}
			last := uint64(len(sg.log)) + initialIndex
			if sg.handed == last || rng.IntN(3) == 0 {
				continue
			}
			hi := sg.handed + 1 + uint64(rng.IntN(int(last-sg.handed)))
			var ents []*pb.Entry
			for i := sg.handed + 1; i <= hi; i++ {
				ents = append(ents, &pb.Entry{Index: new(i), Term: new(uint64(1)), Data: []byte(sg.log[i-2])})
			}
			batch = append(batch, &applyReq{g: sg.g, apply: &pb.Message{Entries: ents}})
			sg.handed = hi
		}
		type viewed struct {
			sg     *simGroup
			before uint64 // handed to the applier in earlier steps
			got    map[string]bool
		}
		var views []viewed
		for _, sg := range groups {
			if rng.IntN(4) == 0 {
				got := map[string]bool{}
				v := &applyReq{g: sg.g, done: make(chan struct{}), view: func(b *bolt.Bucket) error {
					return b.ForEach(func(_, v []byte) error { got[string(v)] = true; return nil })
				}}
				batch = append(batch, v)
				views = append(views, viewed{sg: sg, before: handedBefore[sg], got: got})
			}
		}
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		a.step(batch, now)
		for _, r := range batch {
			select {
			case <-r.done: // a view
			default:
				if r.done == nil && !handedBack(r) {
					t.Fatalf("seed %d step %d: group %d's request was not answered in its step", seed, stepNo, r.g.id)
				}
			}
		}
		if broken != nil {
			if !errors.Is(broken, errPoison) {
				t.Fatalf("seed %d step %d: the applier stopped: %v", seed, stepNo, broken)
			}
			for _, r := range batch {
				if r.apply == nil {
					continue
				}
				if r.err == nil {
					t.Fatalf("seed %d step %d: an apply of the step whose Apply failed succeeded", seed, stepNo)
				}
				for _, e := range r.apply.GetEntries() {
					if n := r.g.sm.(*simSM).effects[e.GetIndex()]; n != 0 {
						t.Fatalf("seed %d step %d: group %d's effect of entry %d ran in the step whose Apply failed", seed, stepNo, r.g.id, e.GetIndex())
					}
				}
			}
			later := &applyReq{g: groups[0].g, done: make(chan struct{}), view: func(*bolt.Bucket) error { return nil }}
			a.step([]*applyReq{later}, now)
			if later.err == nil {
				t.Fatalf("seed %d step %d: the applier served a request after an Apply failed", seed, stepNo)
			}
		}
		for _, sg := range groups {
			sg.g.mu.Lock()
			sg.g.in.applied = nil
			sg.g.in.failure = nil
			sg.g.mu.Unlock()
			for i, n := range sg.sm.effects {
				if n > 1 {
					t.Fatalf("seed %d step %d: group %d's effect of entry %d ran %d times", seed, stepNo, sg.g.id, i, n)
				}
			}
		}
		if broken != nil {
			// The bug is fixed; the node restarts.
			for _, sg := range groups {
				if i := slices.Index(sg.log, "poison"); i >= 0 {
					sg.log[i] = "cured"
				}
			}
			broken = nil
			restart()
			continue
		}
		for _, v := range views {
			for i := uint64(initialIndex + 1); i <= v.before; i++ {
				if d := v.sg.log[i-2]; !v.got[d] {
					t.Fatalf("seed %d step %d: a view of group %d misses entry %d (%s), applied in an earlier step", seed, stepNo, v.sg.g.id, i, d)
				}
			}
		}
		if rng.IntN(60) == 0 {
			restart()
		}
	}
	a.step(nil, now.Add(time.Hour))
	if a.tx != nil {
		t.Fatalf("seed %d: a transaction is still open after the last checkpoint was due", seed)
	}
	// Replay what a restart would (entries after each checkpoint), then
	// compare every group's state with its log.
	restart()
	var batch []*applyReq
	for _, sg := range groups {
		var ents []*pb.Entry
		for i := sg.handed + 1; i <= uint64(len(sg.log))+initialIndex; i++ {
			ents = append(ents, &pb.Entry{Index: new(i), Term: new(uint64(1)), Data: []byte(sg.log[i-2])})
		}
		if len(ents) > 0 {
			batch = append(batch, &applyReq{g: sg.g, apply: &pb.Message{Entries: ents}})
		}
	}
	a.step(batch, now.Add(2*time.Hour))
	a.step(nil, now.Add(3*time.Hour))
	err = db.View(func(tx *bolt.Tx) error {
		for _, sg := range groups {
			gb, err := openGroupBuckets(tx, sg.g.id)
			if err != nil {
				return err
			}
			n := 0
			err = gb.state.ForEach(func(k, v []byte) error {
				i := binary.BigEndian.Uint64(k)
				if i != uint64(n)+initialIndex+1 {
					return fmt.Errorf("group %d: state holds index %d after %d entries: not a prefix of the log", sg.g.id, i, n)
				}
				if want := sg.log[i-2]; string(v) != want {
					return fmt.Errorf("group %d index %d holds %q, want %q", sg.g.id, i, v, want)
				}
				n++
				return nil
			})
			if err != nil {
				return err
			}
			if n != len(sg.log) {
				return fmt.Errorf("group %d holds %d entries, want all %d", sg.g.id, n, len(sg.log))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
}

// handedBack says whether an apply request was handed back to its group.
func handedBack(r *applyReq) bool {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	for _, x := range r.g.in.applied {
		if x == r {
			return true
		}
	}
	return false
}

// TestUpdatesStandAlone: an update (a new group's buckets, a pin, a
// removal) runs in a transaction of its own, checkpointed at once, so a
// failing update undoes only itself, and a later failing Apply in the same
// batch, which rolls back the open transaction and stops the applier,
// cannot undo what the update's caller was told is durable.
func TestUpdatesStandAlone(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), stateFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	groups := map[GroupID]*Group{}
	for _, id := range []GroupID{1, 2} {
		if err := db.Update(func(tx *bolt.Tx) error { return createGroupState(tx, id, []uint64{1}, 0) }); err != nil {
			t.Fatal(err)
		}
		groups[id] = &Group{id: id, sm: &simSM{effects: map[uint64]int{}}, wake: make(chan struct{}, 1)}
	}
	now := time.Unix(1_700_000_000, 0)
	var broken error
	a := newApplierState(db, zerolog.Nop(), newMetrics(nil, nil, nil), nil, checkpointPolicy{interval: time.Hour, entries: 1 << 20}, func(err error) { broken = err }, now)
	defer func() {
		if a.tx != nil {
			_ = a.tx.Rollback()
		}
	}()
	apply := func(id GroupID, index uint64, data string) *applyReq {
		return &applyReq{g: groups[id], apply: &pb.Message{Entries: []*pb.Entry{{Index: new(index), Term: new(uint64(1)), Data: []byte(data)}}}}
	}
	update := func(name string, fail bool) *applyReq {
		return &applyReq{done: make(chan struct{}), update: func(tx *bolt.Tx) error {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
			if fail {
				return errors.New("update fails after writing")
			}
			return nil
		}}
	}
	kept, failing := update("kept", false), update("half", true)
	a.step([]*applyReq{apply(1, 2, "a"), kept, failing, apply(1, 3, "b"), apply(2, 2, "poison")}, now)
	if kept.err != nil {
		t.Fatalf("update: %v", kept.err)
	}
	if failing.err == nil {
		t.Fatal("failing update reported no error")
	}
	if !errors.Is(broken, errPoison) {
		t.Fatalf("the applier stopped with %v, want the failed Apply", broken)
	}
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("kept")) == nil {
			t.Error("the update's bucket is gone: a later rollback undid it")
		}
		if tx.Bucket([]byte("half")) != nil {
			t.Error("the failed update's bucket was kept")
		}
		gb, err := openGroupBuckets(tx, 1)
		if err != nil {
			return err
		}
		if gb.state.Get(binary.BigEndian.AppendUint64(nil, 2)) == nil {
			t.Error("group 1's entry 2, applied before the update, was not checkpointed with it")
		}
		if gb.state.Get(binary.BigEndian.AppendUint64(nil, 3)) != nil {
			t.Error("group 1's entry 3, in the transaction the failed Apply rolled back, was checkpointed")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
