// Package freeport hands out 127.0.0.1 ports for tests that start servers
// (in-process nodes or real raftgate processes) which bind them only later.
//
// A port probed with :0 and released lies in the kernel's ephemeral range,
// where an outgoing connection of any process can take it before the
// server binds it ("address already in use"). Ports handed out here come
// from a share of the range below it instead, when the kernel's range
// leaves room; test packages that run at the same time use disjoint
// shares.
package freeport
