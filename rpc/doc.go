// Package rpc holds raftgate's application contracts, one proto file each,
// and their generated code:
//
//   - durable.proto: the commands stored in the groups' logs and the state
//     the groups store; a contract with every data dir ever written, with
//     its compatibility rules at the top. Every log entry is one
//     CommandBatch (EncodeBatch, DecodeBatch; BatchVersion).
//   - dispatch.proto: the ingress-to-node dispatch stream (service Dispatch).
//   - membership.proto: the node-to-node membership API (service Membership).
//
// They share one Go package (as etcd's etcdserverpb does) because the APIs
// carry the durable messages (an append carries an Invoke, a status an
// InvocationRecord). The Raft transport is raftlog's own (raftlog/raftlogpb).
// The package also maps the typed dispatch errors to and from their wire
// form, in one place. It holds no business logic.
//
// Regenerate after editing a .proto (needs protoc from Debian's
// protobuf-compiler and the two Go plugins):
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./rpc ./raftlog/raftlogpb
package rpc

//go:generate protoc -I .. --go_out=.. --go_opt=paths=source_relative --go-grpc_out=.. --go-grpc_opt=paths=source_relative rpc/durable.proto rpc/dispatch.proto rpc/membership.proto
