// Command raftgate is the one raftgate binary: `server` runs a node, `dev`
// runs a local cluster with example services (examples.go: a service, a
// virtual object and a workflow), `echo` serves example services on its
// own, `status`, `backup`, `services`, `invocations`, `nodes`,
// `placement`, `rules`, `invoke` and `bench` talk to a running cluster over its admin and ingress HTTP
// APIs (see docs/operations.md), and `version` says which build it is
// (version.go).
//
// This package maps flags, RAFTGATE_* environment variables and a config
// file to a server.Config (precedence: flag > env > file > default), and
// holds the operator tools; the node itself is package server, which
// `server` and `dev` run (runServer in server.go).
package main
