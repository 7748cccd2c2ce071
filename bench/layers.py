#!/usr/bin/env python3
# layers.py BIN CPU_US_PER_OP PROF...: each layer's share of the CPU in the
# profiles (cumulative time of the layer's top functions, summed over the
# profiles; nested layers overlap a little), and as µs per operation.
import subprocess, sys, re
bin_, cpuop, prof = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
layers=[
 ("HTTP ingress (net/http serve, handler)", ["net/http.(*conn).serve"]),
 ("dispatch hop, client side", ["dispatch.(*peer).", "dispatch.(*Client)."]),
 ("dispatch hop, server side", ["dispatch.(*serverStream).", "dispatch.(*Server)."]),
 ("partition: proposer, tracker", ["partition.(*Processor).proposer", "partition.(*Processor).propose"]),
 ("raft (group loops)", ["raftlog.(*Group).run"]),
 ("raft transport (peer send/recv)", ["raftlog.(*peerSender).", "raftlog.(*raftServer)."]),
 ("log write (WAL write + fdatasync)", ["raftlog.(*logWriter).run"]),
 ("apply (state machines in the open tx)", ["raftlog.(*applier).runBatch"]),
 ("checkpoint (bbolt commit)", ["raftlog.(*applier).checkpoint"]),
 ("gRPC framing (loopy writer, readers)", ["transport.(*loopyWriter).run", "transport.(*http2Client).reader", "transport.(*http2Server).HandleStreams"]),
 ("garbage collection", ["runtime.gcBgMarkWorker"]),
]
def ms(v):
    if v.endswith('ms'): return float(v[:-2])
    if v.endswith('us'): return float(v[:-2])/1000
    if v.endswith('s'): return float(v[:-1])*1000
    return float(v)
total=0; cum={}
for p in prof:
    out=subprocess.run(["go","tool","pprof","-top","-cum","-nodecount=3000",bin_,p],capture_output=True,text=True).stdout
    m2=re.search(r'Showing nodes accounting for [^,]+, [0-9.]+% of ([0-9.]+[mu]?s) total', out)
    t=ms(m2.group(1)) if m2 else 0
    total+=t
    for line in out.splitlines():
        f=line.split()
        if len(f)>=6 and re.match(r"^[0-9.]+[mu]?s$", f[3]):
            name=f[5]
            cum[name]=cum.get(name,0)+ms(f[3])
print(f"profiles: {total:.0f} ms of CPU samples; {cpuop:.0f} us/op over the three nodes")
print("| layer | share of server CPU | us per op |")
print("|---|---:|---:|")
for label, pats in layers:
    v=sum(c for n,c in cum.items() if any(n.startswith(pp) or ('/'+pp) in n or n.endswith(pp) or pp in n for pp in pats))
    print(f"| {label} | {100*v/total:.1f}% | {cpuop*v/total:.0f} |")
