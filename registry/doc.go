// Package registry is the metadata group's state machine: the service
// registry. Registry implements raftlog.StateMachine for raftlog.MetaGroup;
// its log entries are rpc.CommandBatches of PutService and DeleteService
// (and PutRule and DeleteRule).
//
// Put and Delete are leader-only: they propose the command with a fresh
// request id and return, with the entry's index, once it applied and is
// visible to Lookup on this node (answered from Reveal, matched by package
// proposals on request id and term); *rpc.NotLeaderError on a follower,
// rpc.ErrLostLeadership when leadership is lost while waiting. Every
// registration carries the index it was applied at (RegisteredIndex), so
// that a partition told of a later change (rpc.FenceService, sent by the
// node that took the change before it answers) can refuse an invocation
// checked against it. Writer is how a node takes a change: it answers Put
// or Delete only once every partition was fenced at it (fence.go).
//
// Lookup and List read this replica's applied copy from memory. CatchUp
// brings the replica up to what the leader committed; LookupCurrent
// catches up before it answers, so a service registered a moment ago
// through another node is found. IngressLookup and InvokerLookup are the
// readers' lookups, each with the consistency its reader needs
// (lookup.go).
//
// A service has a kind: a plain service (the default, and what every
// registration from before kinds existed reads as), a virtual object or a
// workflow. Exclusive says which handlers of a keyed service hold their key
// while they run (package partition queues them per key).
//
// The registry also holds the cluster's scope rules (rules.go): per-scope
// concurrency limits, "*" for every scope, an exact scope winning over
// "*" (RuleFor). Every PutRule and DeleteRule names the version it
// replaces and is refused with rpc.ErrConflict when another change came
// first, so two operators cannot overwrite each other silently.
//
// The naming rules of services and handlers are here too (names.go): the
// admin API registers no other names, and the ingress calls no other
// handler names.
//
// State in the group's bucket:
//
//	services   name → rpc.Service
//	rules      pattern → rpc.Rule
package registry
