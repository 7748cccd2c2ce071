// Command echo is the trivial service every system in bench/compare invokes:
// POST /{Service}/{handler} answers 200 with the request body and its
// content-type, so the measured cost is the durable invocation path alone.
// GET /stats reports deliveries and distinct x-restate-id values seen, which
// shows how many deliveries were repeats (delivery is at-least-once).
package main
