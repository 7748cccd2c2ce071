package server

import (
	"slices"
	"testing"
)

func TestLocalLeadersFollowsEvents(t *testing.T) {
	var l localLeaders
	if got := l.partitions(); len(got) != 0 {
		t.Fatalf("empty set lists %v", got)
	}
	l.set(3, true)
	l.set(1, true)
	l.set(3, true) // again: no change
	held := l.partitions()
	if !slices.Equal(held, []uint32{1, 3}) {
		t.Fatalf("partitions = %v, want [1 3]", held)
	}
	l.set(3, false)
	l.set(2, false) // never led: no change
	if got := l.partitions(); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("after losing 3: %v, want [1]", got)
	}
	if !slices.Equal(held, []uint32{1, 3}) {
		t.Fatalf("a slice handed out earlier changed to %v", held)
	}
}
