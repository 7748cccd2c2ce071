package leadership

import (
	"errors"
	"reflect"
	"testing"
)

func TestMergeEntry(t *testing.T) {
	for _, tc := range []struct {
		name        string
		current     Entry
		have        bool
		incoming    Entry
		want        Entry
		wantChanged bool
	}{
		{"unknown partition takes incoming", Entry{}, false, Entry{2, 5}, Entry{2, 5}, true},
		{"unknown partition takes leaderless term", Entry{}, false, Entry{0, 5}, Entry{0, 5}, true},
		{"empty incoming ignored", Entry{}, false, Entry{}, Entry{}, false},
		{"higher term wins", Entry{1, 4}, true, Entry{2, 5}, Entry{2, 5}, true},
		{"higher term with same leader", Entry{1, 4}, true, Entry{1, 5}, Entry{1, 5}, true},
		{"higher term without leader clears leader", Entry{1, 4}, true, Entry{0, 5}, Entry{0, 5}, true},
		{"lower term never overwrites", Entry{2, 5}, true, Entry{1, 4}, Entry{2, 5}, false},
		{"lower term never overwrites unknown leader", Entry{0, 5}, true, Entry{1, 4}, Entry{0, 5}, false},
		{"equal term keeps known leader", Entry{2, 5}, true, Entry{3, 5}, Entry{2, 5}, false},
		{"equal term fills unknown leader", Entry{0, 5}, true, Entry{3, 5}, Entry{3, 5}, true},
		{"equal term unknown does not clear", Entry{2, 5}, true, Entry{0, 5}, Entry{2, 5}, false},
		{"same entry is no change", Entry{2, 5}, true, Entry{2, 5}, Entry{2, 5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := mergeEntry(tc.current, tc.have, tc.incoming)
			if got != tc.want || changed != tc.wantChanged {
				t.Fatalf("mergeEntry(%+v, %v, %+v) = %+v, %v; want %+v, %v",
					tc.current, tc.have, tc.incoming, got, changed, tc.want, tc.wantChanged)
			}
		})
	}
}

// TestTableOrderIndependent checks that every order of the same updates
// ends in the same table: gossip delivers in any order.
func TestTableOrderIndependent(t *testing.T) {
	updates := []Update{
		{1, Entry{1, 3}}, {1, Entry{0, 4}}, {1, Entry{2, 4}}, {1, Entry{3, 2}},
		{2, Entry{3, 7}}, {2, Entry{0, 7}}, {2, Entry{1, 6}},
	}
	want := table{1: {2, 4}, 2: {3, 7}}
	permute(updates, func(order []Update) {
		got := table{}
		got.applyAll(order)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v: table %v, want %v", order, got, want)
		}
	})
}

func permute(us []Update, fn func([]Update)) {
	var rec func(k int)
	rec = func(k int) {
		if k == len(us) {
			fn(us)
			return
		}
		for i := k; i < len(us); i++ {
			us[k], us[i] = us[i], us[k]
			rec(k + 1)
			us[k], us[i] = us[i], us[k]
		}
	}
	rec(0)
}

func TestApplyAllReportsChanges(t *testing.T) {
	tb := table{1: {1, 5}}
	changed := tb.applyAll([]Update{{1, Entry{2, 4}}, {2, Entry{0, 1}}, {2, Entry{3, 1}}, {1, Entry{2, 6}}})
	want := []Update{{2, Entry{0, 1}}, {2, Entry{3, 1}}, {1, Entry{2, 6}}}
	if !reflect.DeepEqual(changed, want) {
		t.Fatalf("changed %v, want %v", changed, want)
	}
}

func TestUpdatesRoundTrip(t *testing.T) {
	us := []Update{{0, Entry{1, 1}}, {7, Entry{0, 9}}, {1<<32 - 1, Entry{1<<64 - 1, 1<<64 - 1}}}
	got, err := decodeUpdates(encodeUpdates(us))
	if err != nil || !reflect.DeepEqual(got, us) {
		t.Fatalf("round trip: %v, %v; want %v", got, err, us)
	}
	if got, err := decodeUpdates(encodeUpdates(nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty round trip: %v, %v", got, err)
	}
}

func TestDecodeUpdatesRejectsGarbage(t *testing.T) {
	good := encodeUpdates([]Update{{3, Entry{1, 2}}})
	for name, buf := range map[string][]byte{
		"empty":          nil,
		"bad version":    {9, 0},
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte{}, good...), 0),
		"huge count":     {updatesVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"partition > 32": encodeUpdatesRaw(1<<33, 1, 1),
	} {
		if _, err := decodeUpdates(buf); !errors.Is(err, errMalformedUpdates) {
			t.Errorf("%s: err %v, want errMalformedUpdates", name, err)
		}
	}
}

func encodeUpdatesRaw(p, leader, term uint64) []byte {
	buf := []byte{updatesVersion, 1}
	for _, v := range []uint64{p, leader, term} {
		for v >= 0x80 {
			buf = append(buf, byte(v)|0x80)
			v >>= 7
		}
		buf = append(buf, byte(v))
	}
	return buf
}

func TestNodeInfoRoundTrip(t *testing.T) {
	n := NodeInfo{ID: 42, IngressAddr: "127.0.0.1:8080", AdminAddr: "", NodeAddr: "[::1]:5122"}
	got, err := decodeNodeInfo(encodeNodeInfo(n))
	if err != nil || got != n {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if _, err := decodeNodeInfo(encodeNodeInfo(n)[:5]); !errors.Is(err, errMalformedMeta) {
		t.Fatalf("truncated: %v", err)
	}
}

func TestValidateRejectsOversizeMeta(t *testing.T) {
	c := DefaultLocalConfig()
	c.Self = NodeInfo{ID: 1, NodeAddr: string(make([]byte, metaMaxSize))}
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
	}
	c.Self.NodeAddr = "127.0.0.1:1"
	c.SecretKey = []byte("short")
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate bad key: %v", err)
	}
	c.SecretKey = nil
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate good config: %v", err)
	}
}
