//go:build !soak

package test

// soak is true under -tags soak: tests that sample their cases in the
// ordinary run run them all.
const soak = false
