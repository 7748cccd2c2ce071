// Package dispatch is the pipelined gRPC dispatch stream between an
// ingress (or admin API) and the nodes that lead partitions: the client
// every node's ingress uses, and the server every node runs.
//
// One bidirectional stream per (client, node) pair carries many requests at
// once. Each request names an opaque correlation id; the server handles
// requests concurrently and answers on the same stream in any order, and
// the client matches answers to waiting callers by that id. The server
// assumes nothing about the ids (order, density, uniqueness across
// streams); the client draws a fresh random id for every attempt and drops
// an answer whose id nobody waits for.
//
// The stream is the Batches RPC: each gRPC message (frame) carries every
// request queued when the client's sender wakes, or every answer queued
// when the server's sender wakes, so a busy stream pays framing, a write
// and a wake-up per batch rather than per request, while a lone request
// still goes at once. A frame holds at most 256 requests (MaxSendBatch
// answers) and 1 MiB; a larger request or answer goes alone. Batching
// changes nothing else: each request is accepted, bounded and answered on
// its own. The server still serves the per-message Stream RPC for clients
// of older releases, and the client opens one towards a node that does not
// serve Batches (a rolling upgrade): it sees that node refuse Batches
// (UNIMPLEMENTED, before any request is sent, because a server that serves
// Batches sends its headers at once) and asks again at every new stream.
//
// A request for a partition this node leads itself does not take a stream:
// with ClientConfig.Local set (the binary sets it to the Backend its Server
// serves), the attempt runs on that Backend in process, under the same
// per-node bound, answers and retries, and ends with ErrClosed when the
// client closes.
//
// Failure handling is event-driven, never by timeout: when a stream breaks,
// every request in flight on it fails at once on both sides (the server
// cancels the requests' contexts; the client retries them), and a server
// that closes answers everything in flight with LOST_LEADERSHIP first.
//
// The client retries NOT_LEADER (following the leader it names),
// LOST_LEADERSHIP and broken or unreachable nodes with the same request id
// and a fresh correlation id, re-resolving the leader each time, with
// exponential backoff and jitter, until the caller's deadline; then it
// returns an error wrapping rpc.ErrUnavailable. Retrying is safe because the
// partition de-duplicates on the invocation and request ids.
//
// Both sides bound what is in flight (per stream and per node on the
// server, per node on the client) and answer rpc.ErrOverloaded at once past
// the bound instead of queueing.
//
// Operating notes:
//   - Shut a node down with Server.Close before grpc.Server.GracefulStop:
//     dispatch streams are long-lived and GracefulStop waits for them.
//     Server.Close waits for backend calls, which must honour ctx.
//   - A peer that vanishes without closing its TCP connection is only
//     noticed by gRPC keepalive: give the client keepalive.ClientParameters
//     in DialOptions and the server a matching EnforcementPolicy.
//   - Client.Call is an append with attach set: the leader answers once
//     the result exists, so a call costs one request; a node without
//     CallBackend (an older release) answers a plain append, and the
//     caller attaches by id. Call starts no retry after its append timeout,
//     and after its deadline still waits callGrace for the leader's answer,
//     which says the invocation was appended.
//   - Attach and Call carry the caller's remaining deadline (timeout_ms) so the
//     server drops the wait when the caller gives up; a caller that cancels
//     without a deadline leaves the server's wait in place until the
//     invocation completes or the stream ends.
package dispatch
