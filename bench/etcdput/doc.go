// Command etcdput is a closed-loop put load generator for etcd, the baseline
// of bench/compare. Each of --concurrency clients issues its next Put when the
// previous one answered (a put is acknowledged only after a quorum fsynced
// it, as a raftgate /send is); the report has the same JSON fields as
// `raftgate bench --json` so the compare script reads both alike.
package main
