// Package bench is the root of raftgate's benchmark module: the tools that
// compare raftgate with etcd and Restate (compare), measure how its costs
// scale (costmodel), where the CPU of an accepted invocation goes, layer by
// layer (layers), what its threads cost in context switches (ctxswitch),
// how it drains a backlog and idles (backlog), what flow control costs
// when its limits do not bind (flowcost), and what each node spends per
// invocation as the cluster grows with R = 3 (scale), and what the
// partition count costs three nodes, in Raft entries per invocation
// (partcost). It is a separate Go
// module so that the main module never depends on etcd; its own code lives
// in the sub-packages echo, etcdput and fsyncprobe (what a bbolt-shaped
// commit costs on this disk, by pages written, or, with -threads, how
// concurrent fdatasyncs of one file scale).
package bench
