//go:build !soak

package test

// The default suite's sizes of the flow-control tests; flow_soak_test.go
// has the soak's (-tags soak).
const (
	flowSends       = 300  // sends per limited service, across a leader kill
	flowRateSends   = 150  // sends to the rate-limited service
	flowSingleSends = 60   // sends to the service limited to one at a time
	flowHotSends    = 1000 // sends queued on the hot key
)
