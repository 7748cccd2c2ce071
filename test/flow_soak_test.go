//go:build soak

package test

// The soak's sizes of the flow-control tests (issue 40's figures); the
// default suite runs flow_sizes_test.go's.
const (
	flowSends       = 2000
	flowRateSends   = 1000
	flowSingleSends = 400 // sends to the service limited to one at a time
	flowHotSends    = 10000
)
