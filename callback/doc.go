// Package callback is the contract of completion callbacks (docs/api.md,
// "Completion callbacks"): which URLs an operator allows (Allow, a list
// of origins), what raftgate POSTs to one (Payload), and how the POST is
// signed (Sign, Verify: HMAC-SHA256 of the body with the cluster's
// callback secret, in x-raftgate-signature as "sha256=HEX").
//
// It holds no state and does no I/O: the ingress checks a send's callback
// URL with Allow, the partition leader's callback deliverer builds,
// signs and POSTs the payload.
package callback
