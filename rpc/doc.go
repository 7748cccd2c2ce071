// Package rpc holds raftgate's protobuf and gRPC definitions and their
// generated code: the node-to-node Raft transport, the commands stored in
// the groups' logs, and the ingress-to-node dispatch stream. Every log entry
// is one CommandBatch (EncodeBatch, DecodeBatch; BatchVersion). It also maps
// the typed dispatch errors to and from their wire form, in one place. It
// holds no business logic.
//
// Regenerate after editing raftgate.proto (needs protoc from Debian's
// protobuf-compiler and the two Go plugins):
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./rpc
package rpc

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative raftgate.proto cluster.proto shares.proto
