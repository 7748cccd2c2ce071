#!/usr/bin/env python3
# layers.py BIN CPU_US_PER_OP PROF...: each layer's share of the CPU in the
# profiles, and as µs per operation. A sample counts once for a layer when
# any frame of its stack belongs to the layer, so a layer is never counted
# twice; a sample can belong to two layers when they nest (the in-process
# dispatch runs inside the HTTP handler), so the shares may add up to more
# than 100%.
import subprocess, sys, re
bin_, cpuop, prof = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
layers = [
    ("HTTP ingress (net/http serve, handler)", ["net/http.(*conn).serve"]),
    ("dispatch hop, client side", ["dispatch.(*peer).", "dispatch.(*Client)."]),
    ("dispatch hop, server side", ["dispatch.(*serverStream).", "dispatch.(*Server)."]),
    ("partition: proposer, tracker", ["partition.(*Processor).propose"]),
    ("raft (group loops)", ["raftlog.(*Group).run"]),
    ("raft transport (peer send/recv)", ["raftlog.(*peerSender).", "raftlog.(*raftServer)."]),
    ("log write (WAL write + fdatasync)", ["raftlog.(*logWriter).run"]),
    ("apply (state machines in the open tx)", ["raftlog.(*applier).runBatch"]),
    ("checkpoint (bbolt commit)", ["raftlog.(*applier).checkpoint"]),
    ("invoker: scan and delivery (HTTP client)", ["partition.(*invoker)."]),
    ("gRPC framing (loopy writer, readers)", ["transport.(*loopyWriter).run", "transport.(*http2Client).reader", "transport.(*http2Server).HandleStreams"]),
    ("garbage collection", ["runtime.gcBgMarkWorker"]),
]
def ms(v):
    for unit, scale in (("ms", 1), ("us", 1e-3), ("ns", 1e-6), ("s", 1e3)):
        if v.endswith(unit):
            return float(v[:-len(unit)]) * scale
    return float(v)
def traces(path):
    """Yields (ms, [function names]) for every stack in the profile."""
    out = subprocess.run(["go", "tool", "pprof", "-traces", bin_, path], capture_output=True, text=True).stdout
    for block in out.split("-----------+-------------------------------------------------------")[1:]:
        lines = [l for l in block.splitlines() if l.strip()]
        if not lines:
            continue
        first = lines[0].split()
        yield ms(first[0]), [first[1]] + [l.split()[0] for l in lines[1:]]
total = 0.0
per_layer = [0.0] * len(layers)
for p in prof:
    for v, stack in traces(p):
        total += v
        for i, (_, pats) in enumerate(layers):
            if any(pp in fn for fn in stack for pp in pats):
                per_layer[i] += v
print(f"profiles: {total:.0f} ms of CPU samples; {cpuop:.0f} us/op over the three nodes")
print("| layer | share of server CPU | us per op |")
print("|---|---:|---:|")
for (label, _), v in zip(layers, per_layer):
    print(f"| {label} | {100*v/total:.1f}% | {cpuop*v/total:.0f} |")
