#!/usr/bin/env bash
# The gateway's per-request costs on bench-gateway.sh's native route (POST /invocations, the
# 4 KiB body bench/gateway/body-4k.json, prefix-aware over three nginx ports answering
# {"ok":true}), for docs/performance.md:
#   1. under load (wrk -t1 -c64, wrk and nginx on CPU 0, the gateway alone on CPU 1):
#      CPU per request (perf stat task-clock) and system calls per request (perf stat on the
#      syscalls:sys_enter_* tracepoints), over --seconds of the run;
#   2. heap allocations per request (valgrind --tool=dhat): blocks and bytes allocated during
#      a short wrk -c4 run, minus those of a run that served no request, divided by the
#      requests served;
#   3. with --record, the hottest functions (perf record -g for 2 s of the same load,
#      perf report --no-children).
# Loopback only; every load run is bounded by wrk -d. Needs perf (linux-perf), valgrind, wrk,
# nginx (scripts/setup.sh installs them) and root or perf_event_paranoid <= 1 for perf.
#
# Usage: scripts/profile-gateway.sh [--bin PATH] [--seconds S] [--record] [--port-base B]
#        (default --bin build/release/src/prefix-router, --seconds 5, --port-base 39080)
#        PERF_CALLGRAPH="--call-graph dwarf,16384" records whole call chains with --record (the
#        release build has no frame pointers: the default -g shows callers of inlined code poorly).
#        PROFILE_KEEP=1 keeps the run directory (perf.data, dhat.idle.json, dhat.load.json) for a
#        closer look (dh_view.html, or the allocation sites by count) and prints its path.
# To compare two builds, run it once per binary (for example one built from an older commit
# with `git worktree add` and scripts/build.sh release) on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=build/release/src/prefix-router
seconds=5
record=0
base=39080
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --record) record=1 ;;
    --port-base) base=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "profile-gateway: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
case "$seconds$base" in *[!0-9]*) echo "profile-gateway: --seconds and --port-base take whole numbers" >&2; exit 2 ;; esac
for tool in perf valgrind wrk nginx curl python3 taskset; do
  command -v "$tool" >/dev/null || { echo "profile-gateway: $tool not found: run scripts/setup.sh" >&2; exit 1; }
done
[ -x "$bin" ] || { echo "profile-gateway: $bin not found: run scripts/build.sh release" >&2; exit 1; }

gw_port=$base
up_ports=($((base + 1)) $((base + 2)) $((base + 3)))
run=$(mktemp -d /tmp/profile-gateway.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "${PROFILE_KEEP:-}" ]; then echo "profile-gateway: kept $run (perf.data, dhat.*.json)" >&2; else rm -rf "$run"; fi
}
trap cleanup EXIT

# nginx: the same trivial upstream as bench-gateway.sh.
servers=""
for p in "${up_ports[@]}"; do
  servers+="    server {
        listen 127.0.0.1:$p backlog=4096;
        location / { return 200 '{\"ok\":true}'; }
    }
"
done
mkdir -p "$run/client_body" "$run/proxy" "$run/fastcgi" "$run/uwsgi" "$run/scgi"
python3 - "$root/bench/gateway/nginx-upstream.conf.in" "$run/nginx.conf" "$run" "$servers" <<'PY'
import sys
src, dst, rundir, servers = sys.argv[1:]
t = open(src).read().replace("@RUNDIR@", rundir).replace("@ERRORLOG@", rundir + "/nginx-error.log")
open(dst, "w").write(t.replace("@PORTS_SERVERS@", servers.rstrip("\n")))
PY
taskset -c 0 nginx -p "$run" -c "$run/nginx.conf" -e "$run/nginx-error.log" >"$run/nginx.out" 2>&1 &
pids+=($!)

gw_args=(serve --listen "127.0.0.1:$gw_port" --io-threads 1 --strategy prefix-aware --prefix-length 1024
         --health-interval 0)
for i in 0 1 2; do gw_args+=(--instance "n$i=http://127.0.0.1:${up_ports[$i]};models=bench-model"); done
export BODY_FILE=$root/bench/gateway/body-4k.json
lua=$root/bench/gateway/post.lua
url="http://127.0.0.1:$gw_port/invocations"

wait_up() {
  for _ in $(seq 150); do curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$gw_port/health" && return 0; sleep 0.2; done
  echo "profile-gateway: the gateway did not answer on port $gw_port:" >&2; tail -5 "$run/gw.log" >&2 || true; exit 1
}
served() {  # responses the gateway has counted
  curl -s "http://127.0.0.1:$gw_port/metrics" | awk '/^prefix_router_responses_total/ {s += $2} END {print s + 0}'
}

# ---- 1. CPU and system calls per request under load
taskset -c 1 "$bin" "${gw_args[@]}" >"$run/gw.log" 2>&1 &
gw=$!
pids+=($gw)
wait_up
events=task-clock,context-switches
for s in recvmsg recvfrom sendmsg sendto readv writev read write epoll_wait epoll_ctl timerfd_settime; do
  events+=",syscalls:sys_enter_$s"
done
taskset -c 0 wrk -t1 -c64 -d$((seconds + 5))s -s "$lua" "$url" >"$run/wrk.txt" &
wrk_pid=$!
sleep 1
n0=$(served)
perf stat -x, -e "$events" -p "$gw" -- sleep "$seconds" 2>"$run/perfstat.txt"
n1=$(served)
if [ "$record" = 1 ]; then
  perf record -F 1999 ${PERF_CALLGRAPH:--g} -p "$gw" -o "$run/perf.data" -- sleep 2 >/dev/null 2>"$run/perf-record.log" || true
fi
wait "$wrk_pid"
echo "== under load (wrk -t1 -c64), $((n1 - n0)) requests in $seconds s, per request:"
python3 - "$run/perfstat.txt" "$((n1 - n0))" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
if n <= 0: sys.exit("profile-gateway: no request was served during the measurement")
for line in open(path):
    f = line.strip().split(",")
    if len(f) < 3 or not f[0].replace(".", "").isdigit(): continue
    v, name = float(f[0]), f[2].replace("syscalls:sys_enter_", "")
    if name == "task-clock": print(f"  CPU: {v * 1e3 / n:.1f} us")
    elif v > 0: print(f"  {name}: {v / n:.2f}")
PY
if [ "$record" = 1 ]; then
  echo "== hottest functions (self time, 2 s of perf record -g under the same load)"
  perf report -i "$run/perf.data" --no-children --stdio -g none --percent-limit 1 2>/dev/null |
    grep -v -e '^#' -e '^$' | cut -c1-160 | head -30 || true
fi
kill -TERM "$gw"; wait "$gw" 2>/dev/null || true

# ---- 2. heap allocations per request (dhat), net of start-up and shutdown
dhat_run() {  # dhat_run NAME LOAD_SECONDS: prints "requests blocks bytes"
  taskset -c 1 valgrind --tool=dhat --dhat-out-file="$run/dhat.$1.json" "$bin" "${gw_args[@]}" >"$run/dhat.$1.log" 2>&1 &
  local vg=$!
  wait_up
  if [ "$2" -gt 0 ]; then taskset -c 0 wrk -t1 -c4 -d"$2"s -s "$lua" "$url" >/dev/null; fi
  local n
  n=$(served)
  kill -INT "$vg"; wait "$vg" 2>/dev/null || true
  python3 - "$run/dhat.$1.log" "$n" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"Total:\s+([\d,]+) bytes in ([\d,]+) blocks", t)
if not m: sys.exit("profile-gateway: no dhat summary in " + sys.argv[1])
print(sys.argv[2], m.group(2).replace(",", ""), m.group(1).replace(",", ""))
PY
}
read -r n0 k0 b0 < <(dhat_run idle 0)
read -r n1 k1 b1 < <(dhat_run load "$seconds")
python3 - "$n0" "$k0" "$b0" "$n1" "$k1" "$b1" <<'PY'
import sys
n0, k0, b0, n1, k1, b1 = map(int, sys.argv[1:])
n = n1 - n0
if n <= 0: sys.exit("profile-gateway: no request was served under dhat")
print(f"== heap (valgrind dhat, wrk -c4), {n} requests, per request:")
print(f"  blocks allocated: {(k1 - k0) / n:.1f}")
print(f"  bytes allocated: {(b1 - b0) / n:.0f}")
PY
