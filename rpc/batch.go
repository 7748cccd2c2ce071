package rpc

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// BatchVersion is the CommandBatch format this code writes and reads. Every
// group's log (partitions and the metadata group) stores CommandBatches.
const BatchVersion = 1

// ErrUnknownVersion is returned (wrapped) for a log entry written in a batch
// format this code does not know; applying it would diverge from replicas
// that do, so the group stops instead.
var ErrUnknownVersion = errors.New("unknown command batch version")

// batchMarshal is deterministic: every replica must store the same bytes.
var batchMarshal = proto.MarshalOptions{Deterministic: true}

// EncodeBatch marshals commands into one log entry.
func EncodeBatch(cmds ...*Command) ([]byte, error) {
	data, err := batchMarshal.Marshal(&CommandBatch{Version: BatchVersion, Commands: cmds})
	if err != nil {
		return nil, fmt.Errorf("encode command batch: %w", err)
	}
	return data, nil
}

// DecodeBatch unmarshals one log entry, refusing unknown versions.
func DecodeBatch(data []byte) (*CommandBatch, error) {
	var b CommandBatch
	if err := proto.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("decode command batch: %w", err)
	}
	if b.Version != BatchVersion {
		return nil, fmt.Errorf("%w: %d", ErrUnknownVersion, b.Version)
	}
	return &b, nil
}
