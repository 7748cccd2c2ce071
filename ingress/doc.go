// Package ingress is raftgate's HTTP ingress: the API that clients, curl
// scripts and Restate's TypeScript client call (see docs/api.md).
//
// It owns:
//   - routing and parsing of the ingress paths (call, send, attach, output,
//     health; and Restate 1.7's /restate/call|send/…, scoped
//     /restate/scope/{scope}/…, /restate/attach|output/{id} and POST
//     /restate/attach|output|lookup with a JSON target, target.go, each
//     answering as the older path it stands for), the delay/timeout duration syntax (Go and ISO-8601), the
//     idempotency-key header and the JSON error format;
//   - choosing the invocation id and the request id before the first attempt,
//     so that every retry of one HTTP request inside the cluster is the same
//     request (see package invocation and docs/architecture.md);
//   - mapping dispatch errors (rpc.Err*) to HTTP statuses in one place
//     (errors.go), load shedding (429), graceful drain (503) and metrics;
//   - API tokens (auth.go): with Config.Tokens every request but health
//     needs Authorization: Bearer, checked before anything is proposed
//     (401 without a token, 403 with an unknown one or one that does not
//     grant the service, attach, output or cancel); Handler.SetTokens
//     swaps the set on a reload;
//   - cancel (PATCH /restate/invocation/{id}/cancel), when the Dispatcher
//     also implements InvocationControl.
//
// It keeps no durable state. Reaching a partition's leader, with retries, is
// the Dispatcher's job (implemented by ingress/dispatch); the service
// registry is read through ServiceResolver.
//
// Request flow of a call:
//
//  1. parse the path, read the body (bounded in size and time) before
//     taking a concurrency slot, then parse headers and look the service up;
//  2. compute the invocation id (IdempotentID with a key; for a virtual
//     object or workflow, ids in the partition of its (service, key), and
//     one fixed id per workflow run; otherwise a random id, in a partition
//     this node leads when Config.LocalPartitions names one, so that the
//     append runs here without a hop, the led partitions taking turns of
//     Config.LocalTurn invocations) and a request id,
//     both reused on every retry; mark an object's exclusive handlers and a
//     workflow's run exclusive (the partition queues them per key);
//  3. with a Dispatcher that is a Caller (ingress/dispatch's client),
//     Caller.Call: the append and the wait for the result in one request
//     to the partition's leader, retried with the same request id for up
//     to Config.RequestTimeout (the client timeout if shorter), waiting
//     until the result exists, the
//     client timeout passes (470) or the client goes away; an answer
//     without the result (the leader lost leadership mid-wait, or is of an
//     older release) goes on to step 5 with the invocation appended;
//  4. otherwise, and for a workflow's run (409 at once when it ran
//     before), Dispatcher.Append with a deadline of Config.RequestTimeout;
//     the dispatcher retries the same request until the deadline;
//  5. Dispatcher.Attach until the result exists, the client timeout passes
//     (470) or the client goes away;
//  6. answer with the result's status, body and content type.
package ingress
