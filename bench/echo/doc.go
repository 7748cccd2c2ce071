// Command echo is the trivial service every system in bench/compare invokes:
// POST /{Service}/{handler} answers 200 with the request body and its
// content-type, so the measured cost is the durable invocation path alone.
// GET /stats reports deliveries (POSTs carrying an x-restate-id) and the
// distinct ids among them, whose difference is the number of repeated
// deliveries (delivery is at-least-once), and, apart, POSTs without an id
// (the readiness probe of bench/lib.sh).
package main
