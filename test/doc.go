// Package test holds raftgate's process-level end-to-end tests: they build
// the real binary once (TestMain), start real `raftgate server` processes
// on free ports of 127.0.0.1 with their own data directories, drive them
// over HTTP the way users do, and inject faults with signals (kill -9,
// SIGTERM, SIGSTOP/SIGCONT), with a fault-injecting TCP proxy mesh between
// the nodes (faultnet_test.go), and with stale data directories. Each test
// checks invariants over what it recorded: every acknowledged invocation
// has exactly one result, its own.
//
// The robustness suite (robustness_test.go, docs/robustness.md) is
// traffic → failpoint → history → validate: robust_traffic_test.go drives
// careful clients, robust_failpoints_test.go holds one small type per
// fault, robust_check_test.go validates the history (porcupine for
// linearizability per invocation). robust_moves_test.go runs random
// placement moves under the same faults on five nodes with R = 3.
// badinput_test.go throws garbage at the
// node and gossip ports; regressions_test.go guards the fixes of product
// bugs the robustness suite found.
// console_test.go drives the operator console in headless Chromium
// (chromedp); it skips without a browser unless CI is set.
// placement_failpoints_test.go kills the nodes of a placement move at each
// of its steps (the whole matrix with -tags soak). flow_*_test.go check
// flow control from a service that records its own in-flight calls and
// arrival times (concurrency and scope rules across a leader kill, rates,
// a rate following one partition's backlog, a hot key beside a cold one,
// Restate 1.7's paths and TypeScript client). Clusters run two
// partitions unless a test sets a count; dev_test.go runs the default.
//
// The ordinary run (`go test ./test/`) keeps each scenario short; longer
// soaks run with `-tags soak` (RAFTGATE_SOAK_DURATION).
package test
