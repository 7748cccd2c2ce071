// Package server is one raftgate node as a package, for `raftgate server`,
// for Go programs that embed a node, and for tests that run real clusters
// in process (server/servertest).
//
// Config is the node's configuration: DefaultConfig, then the fields to
// change; Validate names the flag of `raftgate server` that sets a bad
// field and wraps ErrInvalidConfig. New checks the config and binds the
// node's listeners, so a port in use fails before the data dir is touched.
// Start opens the data dir and starts the components bottom-up (node.go):
// raftlog's groups with the partitions' and the registry's state machines,
// gossip, the node's gRPC server (Raft transport and dispatch), the admin
// HTTP API, and the check of the node's log against the leaders, after
// which the ingress HTTP API listens (logcheck.go) and Serving is closed.
// Err delivers the failure that stops a node (a Raft group that failed, an
// ingress that could not listen); Close hands the node's leaderships to
// peers, drains within ShutdownGrace and closes everything top-down.
//
// Besides the wiring, the package holds what belongs to a node rather
// than to one component: the dispatch backend that routes a request to the
// partition owning its invocation (backend.go), the partition count pinned
// in the data dir (datadir.go), node-level metrics (groupmetrics.go,
// diskmetrics.go, buildinfo.go), the set of partitions led here for
// placement (localleaders.go), node TLS (tls.go), the ingress token file
// re-read on SIGHUP (tokens.go), and the crash tests' failpoints
// (failpoint.go, for those tests only).
package server
