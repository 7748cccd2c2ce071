// Command raftgate is the one raftgate binary: `server` runs a node, `dev`
// runs a local cluster with an example service, `echo` serves an example
// service on its own, and `status`, `backup`, `services`, `invoke` and
// `bench` talk to a running cluster over its admin and ingress HTTP APIs
// (see API.md, "Command line").
//
// This package maps flags, RAFTGATE_* environment variables and a config
// file to configs (precedence: flag > env > file > default), and holds the
// operator tools; the components themselves live in library packages and
// are composed in node.go.
package main
