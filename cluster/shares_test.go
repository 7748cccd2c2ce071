package cluster

import (
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/rpc"
)

func setSharesCmd(f *rpc.FlowShares) *rpc.Command {
	return &rpc.Command{Cmd: &rpc.Command_SetFlowShares{SetFlowShares: &rpc.SetFlowShares{Shares: []*rpc.FlowShares{f}}}}
}

func split(key string, figure uint32, version uint64, shareCeil ...uint32) *rpc.FlowShares {
	f := &rpc.FlowShares{Key: key, Figure: figure, Version: version}
	for i := 0; i < len(shareCeil); i += 2 {
		f.Parts = append(f.Parts, &rpc.FlowShare{Share: shareCeil[i], Ceiling: shareCeil[i+1]})
	}
	return f
}

// SetFlowShares: compare-and-swap on the version, ceilings within the
// figure when one rises, parts' versions bumped when their share changes,
// and the record loads back as applied.
func TestSetFlowShares(t *testing.T) {
	db := openDB(t)
	s, _, err := step(t, db, &State{}, 1, initCmd([]byte("0123456789abcdef"), 1))
	if err != nil {
		t.Fatal(err)
	}
	const key = "s\x00svc"
	s, _, err = step(t, db, s, 2, setSharesCmd(split(key, 3, 0, 1, 1, 1, 1, 1, 1, 0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	// Lower partition 1, raise partition 4 beyond the room: refused.
	if _, _, err := step(t, db, s, 3, setSharesCmd(split(key, 3, 1, 0, 1, 1, 1, 1, 1, 1, 1))); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("ceilings above the figure: %v", err)
	}
	// A stale version: refused.
	if _, _, err := step(t, db, s, 3, setSharesCmd(split(key, 3, 0, 0, 1, 1, 1, 1, 1, 0, 0))); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("stale version: %v", err)
	}
	s, _, err = step(t, db, s, 3, setSharesCmd(split(key, 3, 1, 0, 1, 1, 1, 1, 1, 0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := s.FlowShares(key)
	if !ok || f.Version != 2 || f.Parts[0].Version != 2 || f.Parts[1].Version != 1 || f.Parts[0].Share != 0 || f.Parts[0].Ceiling != 1 {
		t.Fatalf("after lowering partition 1: %v", f)
	}
	var loaded *State
	if err := db.View(func(btx *bolt.Tx) error {
		var err error
		loaded, err = load(btx.Bucket(bucketCluster))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if g, ok := loaded.FlowShares(key); !ok || !proto.Equal(f, g) {
		t.Fatalf("loaded %v, applied %v", g, f)
	}
}
