//go:build soak

package test

import "testing"

// TestPlacementMoveFailpointsMatrix runs every case of the move matrix
// (moveMatrix: each step of a move × each node whose process passes it)
// on one cluster, as TestPlacementMoveFailpoints runs two:
//
//	go test -tags soak ./test -run PlacementMoveFailpointsMatrix -v -timeout 0
func TestPlacementMoveFailpointsMatrix(t *testing.T) {
	runMoveCases(t, robustnessSeed(t), moveMatrix())
}
