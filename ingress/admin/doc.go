// Package admin serves raftgate's admin HTTP API for operators (see
// docs/api.md, "Admin API"): the service registry (PUT/GET/DELETE /services/{name},
// GET /services; a registration's retry policy is shown with the cluster's
// defaults filled in, and its flow-control limits as stored, limits.go),
// scope rules (GET /rules, GET/PUT/DELETE /rules/{pattern}, each change at
// an expected version: 409 when stale, rules.go), the cluster view (GET /cluster, ?leaders=1 filling in
// what only other leaders know), the invocation listing (GET /invocations:
// every partition leader's page, merged newest first), invocation status
// with body previews and cancellation (GET/DELETE /invocations/{id}), the
// node table and node removal (GET /nodes, DELETE /nodes/{id}: 409 with
// the reason when the cluster cannot spare the node), placement (GET
// /placement: each partition's replicas with roles, leaders and move in
// flight; the replication, pausing rebalancing and moving a replica), the
// node's build (GET /version), Prometheus metrics, health and readiness probes, pprof
// behind a flag, and the operator console (/ui/, static files embedded from
// ui/; see docs/console.md).
//
// It owns no state: the node's wiring supplies the cluster view, the
// invocation calls (through the dispatch client), the registry, the node
// table and the placement record as small interfaces declared here, and
// New turns them into an http.Handler. Errors are JSON {"code","message","source":"admin"}; an
// optional bearer token guards every endpoint except /healthz, /readyz and
// the console's static files, which hold no data.
package admin
