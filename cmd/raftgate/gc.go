package main

import (
	"os"
	"runtime/debug"
)

// serverGCPercent is a server's garbage-collection target when GOGC is not
// set: a live heap of a few tens of MiB may grow to three times its size
// before a collection, instead of Go's default two. The collector's CPU on
// the request path falls by about half for some tens of MiB of memory
// (docs/benchmarks.md, "CPU diet"); GOGC set by the operator wins.
const serverGCPercent = 200

// tuneGC sets the server's GC target unless the operator chose one.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serverGCPercent)
	}
}
