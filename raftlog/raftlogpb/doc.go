// Package raftlogpb is the wire format of raftlog's node-to-node transport
// (transport.proto, service Raft): batches of raft messages and snapshot
// chunks. Generated; regenerate with `go generate ./raftlog/raftlogpb`
// (plugins as in rpc/doc.go).
package raftlogpb

//go:generate protoc -I ../.. --go_out=../.. --go_opt=paths=source_relative --go-grpc_out=../.. --go-grpc_opt=paths=source_relative raftlog/raftlogpb/transport.proto
