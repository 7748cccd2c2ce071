package main

import (
	"errors"
	"testing"
)

func TestPinPartitionCount(t *testing.T) {
	dir := t.TempDir()
	if err := pinPartitionCount(dir, 4); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if err := pinPartitionCount(dir, 4); err != nil {
		t.Fatalf("restart with the same count: %v", err)
	}
	err := pinPartitionCount(dir, 3)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("restart with another count: %v, want ErrInvalidConfig", err)
	}
	t.Log(err)
}
