# Shared helpers of bench/compare and bench/costmodel (sourced, not run).
# Everything listens on 127.0.0.1 or inside network namespaces created here;
# every process and namespace started is recorded and removed on exit.

set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
# Tools built or installed once are cached here (not in the repository).
CACHE_DIR=${RAFTGATE_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/raftgate-bench}
BIN_DIR=$CACHE_DIR/bin
WORK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/raftgate-bench.XXXXXX")
# Ports are fixed below the kernel's ephemeral range so that tests running
# beside the benchmark (which bind :0) never take them.
PORT_BASE=${RAFTGATE_BENCH_PORT_BASE:-21000}
ECHO_PORT=$((PORT_BASE + 999))

PIDS=()
NAMESPACES=()

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# stop_pids PID...: SIGTERM, up to 10 s grace, then SIGKILL.
stop_pids() {
	local pid deadline
	for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
	deadline=$((SECONDS + 10))
	for pid in "$@"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
}

# stop_all stops every process started so far (used between systems).
stop_all() {
	((${#PIDS[@]})) && stop_pids "${PIDS[@]}"
	PIDS=()
}

cleanup() {
	local rc=$?
	stop_all
	local ns
	for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	if [[ -n ${KEEP_WORK:-} ]]; then
		log "work dir kept: $WORK_DIR"
	else
		rm -rf "$WORK_DIR"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD...: run CMD in the background, logging to $WORK_DIR/NAME.log.
start() {
	local name=$1
	shift
	"$@" >"$WORK_DIR/$name.log" 2>&1 &
	PIDS+=($!)
}

# wait_until SECONDS WHAT CMD...: poll CMD until it succeeds or time runs out.
wait_until() {
	local limit=$1 what=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || { log "timed out after ${limit}s waiting for $what"; return 1; }
		sleep 0.2
	done
}

port_free() { ! ss -Hltnu "( sport = :$1 )" | grep -q .; }

require_ports_free() {
	local p
	for p in "$@"; do port_free "$p" || die "port $p is in use (set RAFTGATE_BENCH_PORT_BASE)"; done
}

# build_raftgate_tools builds raftgate (unless RAFTGATE_BIN names a binary
# to use) and bench/echo into $BIN_DIR.
build_raftgate_tools() {
	mkdir -p "$BIN_DIR"
	if [[ -n ${RAFTGATE_BIN:-} ]]; then
		log "using raftgate binary $RAFTGATE_BIN"
		cp "$RAFTGATE_BIN" "$BIN_DIR/raftgate"
	else
		log "building raftgate ($(git -C "$REPO_DIR" describe --always --dirty 2>/dev/null || echo unknown))"
		(cd "$REPO_DIR" && go build -o "$BIN_DIR/raftgate" ./cmd/raftgate)
	fi
	(cd "$BENCH_DIR" && go build -o "$BIN_DIR/echo" ./echo)
}

start_echo() {
	require_ports_free "$ECHO_PORT"
	start echo "$BIN_DIR/echo" --addr "127.0.0.1:$ECHO_PORT"
	wait_until 10 "bench/echo" curl -sf -X POST "http://127.0.0.1:$ECHO_PORT/Echo/echo" -d '"x"'
}

# Ports of raftgate node I: node gRPC, ingress, admin, gossip.
rg_node_port() { echo $((PORT_BASE + $1 * 10)); }
rg_ingress_port() { echo $((PORT_BASE + $1 * 10 + 1)); }
rg_admin_port() { echo $((PORT_BASE + $1 * 10 + 2)); }
rg_gossip_port() { echo $((PORT_BASE + $1 * 10 + 3)); }

# start_raftgate NODES PARTITIONS: a fresh cluster under $WORK_DIR/raftgate,
# ready and with Echo registered at bench/echo. Sets RG_INGRESS (comma list)
# RG_ADMIN (node 1's admin URL) and RG_NODES.
start_raftgate() {
	local nodes=$1 partitions=$2 i ic="" join=""
	RG_NODES=$nodes
	rm -rf "$WORK_DIR/raftgate"
	for ((i = 1; i <= nodes; i++)); do
		require_ports_free "$(rg_node_port $i)" "$(rg_ingress_port $i)" "$(rg_admin_port $i)" "$(rg_gossip_port $i)"
		ic+="${ic:+,}$i=127.0.0.1:$(rg_node_port $i)"
		join+="${join:+,}127.0.0.1:$(rg_gossip_port $i)"
	done
	RG_INGRESS=""
	for ((i = 1; i <= nodes; i++)); do
		mkdir -p "$WORK_DIR/raftgate/$i"
		local args=(server --node-id "$i" --data-dir "$WORK_DIR/raftgate/$i"
			--initial-cluster "$ic" --partitions "$partitions" --log-level warn --pprof
			--node-addr "127.0.0.1:$(rg_node_port $i)" --gossip-addr "127.0.0.1:$(rg_gossip_port $i)"
			--ingress-addr "127.0.0.1:$(rg_ingress_port $i)" --admin-addr "127.0.0.1:$(rg_admin_port $i)")
		((nodes > 1)) && args+=(--join "$join")
		start "raftgate-$i" "$BIN_DIR/raftgate" "${args[@]}"
		RG_INGRESS+="${RG_INGRESS:+,}http://127.0.0.1:$(rg_ingress_port $i)"
	done
	RG_ADMIN=http://127.0.0.1:$(rg_admin_port 1)
	for ((i = 1; i <= nodes; i++)); do
		wait_until 60 "raftgate node $i ready" curl -sf "http://127.0.0.1:$(rg_admin_port $i)/readyz" ||
			{ tail -20 "$WORK_DIR/raftgate-$i.log" >&2; return 1; }
	done
	"$BIN_DIR/raftgate" services add Echo "http://127.0.0.1:$ECHO_PORT" --admin "$RG_ADMIN" >/dev/null
	for ((i = 1; i <= nodes; i++)); do
		wait_until 30 "Echo/echo through node $i" curl -sf -X POST \
			"http://127.0.0.1:$(rg_ingress_port $i)/Echo/echo" -H 'content-type: application/json' -d '"warm"'
	done
	# Measure the steady state: a fresh cluster's first leaders are wherever
	# elections fell, and leader balancing hands them to their preferred
	# voters some seconds later, which would land in the measured window.
	wait_until 30 "every group led by its preferred voter" rg_balanced ||
		log "leadership not balanced: measuring anyway"
}

# rg_balanced: every group is led by its preferred voter as raftlog's
# leader balancing computes it: placement's preferred leader when it is a
# voter (GET /placement), else PreferredLeader (the group id modulo its
# sorted voters; every node is a voter without placement).
rg_balanced() {
	if curl -sf "$RG_ADMIN/placement" >"$WORK_DIR/placement.json"; then
		jq -e 'all(.partitions[]; ([.replicas[] | select(.role == "voter") | .node] | sort) as $v |
			.preferredLeader as $p |
			.leader == (if any($v[]; . == $p) then $p else $v[.id % ($v | length)] end))' "$WORK_DIR/placement.json" >/dev/null
		return
	fi
	curl -sf "$RG_ADMIN/cluster" | python3 -c '
import json, sys
c = json.load(sys.stdin)
voters = sorted(n["id"] for n in c["nodes"])
sys.exit(0 if all(p.get("leader") == voters[p["id"] % len(voters)] for p in c["partitions"]) else 1)'
}

# rg_metric NAME: the sum of a metric over every node of the cluster.
rg_metric() {
	local name=$1 i sum=0 v
	for ((i = 1; i <= RG_NODES; i++)); do
		v=$(curl -sf "http://127.0.0.1:$(rg_admin_port $i)/metrics" |
			awk -v n="$name" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.0f", s }')
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}

# rg_heap NODE: live heap bytes of node NODE after a forced GC (pprof's
# heap?gc=1 runs one), from go_memstats_heap_alloc_bytes.
rg_heap() {
	local admin=http://127.0.0.1:$(rg_admin_port "$1")
	curl -sf "$admin/debug/pprof/heap?gc=1" >/dev/null
	curl -sf "$admin/metrics" | awk '$1 == "go_memstats_heap_alloc_bytes" { printf "%.0f", $2 }'
}

# rg_delivered: successful deliveries so far, summed over the cluster.
rg_delivered() {
	local i sum=0 v
	for ((i = 1; i <= RG_NODES; i++)); do
		v=$(curl -sf "http://127.0.0.1:$(rg_admin_port $i)/metrics" |
			awk 'index($1, "raftgate_partition_deliveries_total{") == 1 && $1 ~ /outcome="success"/ { s += $2 } END { printf "%.0f", s }')
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}

# rg_wait_delivered SECONDS TARGET: until at least TARGET deliveries have
# succeeded and the count stood still for a second (there can be more
# deliveries than invocations: delivery is at-least-once; and delayed
# invocations stay in the outboxes, so their depth is no drain signal).
rg_wait_delivered() {
	local limit=$1 target=$2 prev=-1 now
	local deadline=$((SECONDS + limit))
	while ((SECONDS < deadline)); do
		now=$(rg_delivered)
		((now >= target && now == prev)) && return 0
		prev=$now
		sleep 1
	done
	log "timed out after ${limit}s waiting for $target successful deliveries (at $now)"
	return 1
}

# rg_bench OUT ARGS...: `raftgate bench --json` with ARGS, report to OUT.
rg_bench() {
	local out=$1
	shift
	"$BIN_DIR/raftgate" bench --quiet --json "$@" >"$out"
}

# cpu_ticks: user+system CPU clock ticks used so far by every process started.
cpu_ticks() {
	local sum=0 pid
	for pid in "${PIDS[@]}"; do
		[[ -r /proc/$pid/stat ]] && sum=$((sum + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
	done
	echo "$sum"
}

# cpu_per_op TICKS REPORT: CPU microseconds per operation of a bench report
# (warm-up included, as the ticks are).
cpu_per_op() {
	jq -r --argjson t "$1" --argjson hz "$(getconf CLK_TCK)" \
		'($t / $hz * 1e6) / ((.successes + .warmupRequests) | if . == 0 then 1 else . end) | floor' "$2"
}

# cpu_stat: "busy total" jiffies of the whole machine (/proc/stat).
cpu_stat() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }

# busy_percent "BUSY0 TOTAL0": the machine's busy share since that cpu_stat.
busy_percent() {
	local b0 t0 b1 t1
	read -r b0 t0 <<<"$1"
	read -r b1 t1 < <(cpu_stat)
	echo $(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
}

# summary FILE: "throughput p50 p99 errors" of a bench JSON report.
summary() {
	jq -r '"\(.throughput) \(.latencyMs.p50) \(.latencyMs.p99) \(.errors)"' "$1"
}
