// Package test holds raftgate's process-level end-to-end tests: they build
// the real binary once (TestMain), start real `raftgate server` processes on
// free ports of 127.0.0.1 with their own data directories, drive them over
// HTTP the way users do, and inject faults with signals (kill -9, SIGTERM,
// SIGSTOP/SIGCONT). Each test checks invariants over what it recorded: every
// acknowledged invocation has exactly one result, its own.
//
// The ordinary run (`go test ./test/`) keeps each scenario short; longer
// soaks run with `-tags soak`.
package test
