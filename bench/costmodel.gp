# Plot of bench/costmodel:
#   gnuplot -e "dir='DIR'; out='F.png'; clients='64'; bigclients='8'" costmodel.gp
# DIR holds partitions-{call,send}.dat and payload-{call,send}.dat, tab
# separated: dimension nodes partitions payload mode throughput p50 p99 errors.
set terminal pngcairo size 1200,800 font ",11" noenhanced
set output out
set datafile separator "\t"
set grid
set key top right
set multiplot layout 2,2 title sprintf("raftgate cost model (3 nodes, %s closed-loop clients, %s for 1 MiB; fsync on, 2 cores, loopback)", clients, bigclients)

set title "throughput vs partitions (100 B)"
set xlabel "partitions"
set ylabel "ops/s"
set logscale x 2
set yrange [0:*]
plot dir."/partitions-send.dat" using 3:6 with linespoints lw 2 title "send", \
     dir."/partitions-call.dat" using 3:6 with linespoints lw 2 title "call"

set title "p99 latency vs partitions (100 B)"
set ylabel "p99 ms"
plot dir."/partitions-send.dat" using 3:8 with linespoints lw 2 title "send", \
     dir."/partitions-call.dat" using 3:8 with linespoints lw 2 title "call"

set title "throughput vs payload (4 partitions)"
set xlabel "payload bytes"
set ylabel "ops/s"
set logscale x 10
set logscale y 10
set yrange [*:*]
plot dir."/payload-send.dat" using 4:6 with linespoints lw 2 title "send", \
     dir."/payload-call.dat" using 4:6 with linespoints lw 2 title "call"

set title "p99 latency vs payload (4 partitions)"
set ylabel "p99 ms"
plot dir."/payload-send.dat" using 4:8 with linespoints lw 2 title "send", \
     dir."/payload-call.dat" using 4:8 with linespoints lw 2 title "call"
unset multiplot
