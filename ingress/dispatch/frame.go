package dispatch

import (
	"slices"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/rpc"
)

// A frame is one gRPC message on a dispatch stream. On the Batches RPC a
// frame carries many requests or many answers; on the per-message Stream
// RPC (releases before Batches) it carries one.
const (
	// maxFrameBytes bounds the encoded requests or answers packed into one
	// frame, well under the gRPC message limit (4 MiB by default; the
	// largest ingress body plus 4 MiB between raftgate nodes). A request
	// or answer larger than this travels alone, as on Stream.
	maxFrameBytes = 1 << 20
	// maxFrameRequests bounds the requests the client packs into one frame.
	// The server's answers are bounded by ServerConfig.MaxSendBatch.
	maxFrameRequests = 256
)

// frameLen is how many of msgs, from the first, go into the next frame: at
// most maxMsgs, and no more than maxBytes encoded unless the first alone is
// larger. It is at least 1 when msgs is not empty.
func frameLen[M proto.Message](msgs []M, maxMsgs, maxBytes int) int {
	n, size := 0, 0
	for n < len(msgs) && n < maxMsgs {
		// A repeated message field: tag byte, length, message.
		s := 1 + protowire.SizeBytes(proto.Size(msgs[n]))
		if n > 0 && size+s > maxBytes {
			break
		}
		size += s
		n++
	}
	return n
}

// clientWire is the framing of one open client stream. send is called only
// by the stream's send loop, recv only by its receive loop.
type clientWire interface {
	// send writes reqs in as few frames as the bounds allow.
	send(reqs []*rpc.DispatchRequest) error
	// recv returns the answers of the next frame; the slice is valid until
	// the next call.
	recv() ([]*rpc.DispatchResponse, error)
}

// batchClientWire frames a Batches stream.
type batchClientWire struct {
	s rpc.Dispatch_BatchesClient
}

func (w batchClientWire) send(reqs []*rpc.DispatchRequest) error {
	for len(reqs) > 0 {
		n := frameLen(reqs, maxFrameRequests, maxFrameBytes)
		// A fresh slice per frame: gRPC lets stats handlers read a sent
		// message after Send returns, so a sent frame is never modified.
		if err := w.s.Send(&rpc.DispatchRequestBatch{Requests: slices.Clone(reqs[:n])}); err != nil {
			return err
		}
		reqs = reqs[n:]
	}
	return nil
}

func (w batchClientWire) recv() ([]*rpc.DispatchResponse, error) {
	frame, err := w.s.Recv()
	return frame.GetResponses(), err
}

// streamClientWire frames a per-message Stream.
type streamClientWire struct {
	s   rpc.Dispatch_StreamClient
	one [1]*rpc.DispatchResponse
}

func (w *streamClientWire) send(reqs []*rpc.DispatchRequest) error {
	for _, req := range reqs {
		if err := w.s.Send(req); err != nil {
			return err
		}
	}
	return nil
}

func (w *streamClientWire) recv() ([]*rpc.DispatchResponse, error) {
	resp, err := w.s.Recv()
	if err != nil {
		return nil, err
	}
	w.one[0] = resp
	return w.one[:], nil
}

// serverWire is the framing of one served stream. recv is called only by
// the stream's receive goroutine, send and accepted only by its sender.
type serverWire interface {
	// accepted tells the client that the server serves the stream.
	accepted() error
	// recv returns the requests of the next frame; the slice is valid
	// until the next call.
	recv() ([]*rpc.DispatchRequest, error)
	// send writes resps (none nil) in as few frames as the bounds allow.
	send(resps []*rpc.DispatchResponse) error
}

// batchServerWire frames a Batches stream.
type batchServerWire struct {
	s       rpc.Dispatch_BatchesServer
	maxMsgs int
	metrics *serverMetrics
}

// accepted sends the response headers at once: the client waits for them
// to tell this server from one that does not serve Batches.
func (w batchServerWire) accepted() error {
	return w.s.SendHeader(metadata.MD{})
}

func (w batchServerWire) recv() ([]*rpc.DispatchRequest, error) {
	frame, err := w.s.Recv()
	if err != nil {
		return nil, err
	}
	w.metrics.framesReceived.Inc()
	return frame.Requests, nil
}

func (w batchServerWire) send(resps []*rpc.DispatchResponse) error {
	for len(resps) > 0 {
		n := frameLen(resps, w.maxMsgs, maxFrameBytes)
		if err := w.s.Send(&rpc.DispatchResponseBatch{Responses: slices.Clone(resps[:n])}); err != nil {
			return err
		}
		w.metrics.framesSent.Inc()
		resps = resps[n:]
	}
	return nil
}

// streamServerWire frames a per-message Stream.
type streamServerWire struct {
	s       rpc.Dispatch_StreamServer
	metrics *serverMetrics
	one     [1]*rpc.DispatchRequest
}

func (w *streamServerWire) accepted() error { return nil }

func (w *streamServerWire) recv() ([]*rpc.DispatchRequest, error) {
	req, err := w.s.Recv()
	if err != nil {
		return nil, err
	}
	w.metrics.framesReceived.Inc()
	w.one[0] = req
	return w.one[:], nil
}

func (w *streamServerWire) send(resps []*rpc.DispatchResponse) error {
	for _, resp := range resps {
		if err := w.s.Send(resp); err != nil {
			return err
		}
		w.metrics.framesSent.Inc()
	}
	return nil
}
