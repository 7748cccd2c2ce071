//go:build soak

package test

// The soak's sizes of the flow-control tests (issue 40's figures); the
// default suite runs flow_sizes_test.go's.
const (
	flowSends     = 2000
	flowRateSends = 1000
	flowHotSends  = 10000
)
