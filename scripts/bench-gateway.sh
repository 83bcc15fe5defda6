#!/usr/bin/env bash
# Measures what the gateway adds, route by route, in one run, against trivial fast upstreams and
# against Debian's HAProxy 2.6 configured as the equivalent balancer:
#   direct         client -> upstream (one instance port)
#   prefix-router  client -> prefix-router serve --strategy prefix-aware --prefix-length 1024
#                  (instances with `models=bench-model`, so no /v1/models discovery; health
#                  checks off) -> upstream
#   haproxy        client -> HAProxy (balance hash req.body,bytes(0,1024), hash-type consistent,
#                  hash-balance-factor 150, option http-buffer-request; on the stream route also
#                  option http-no-delay; bench/gateway/haproxy.cfg.in) -> upstream
# Routes (--routes, default all, in this order):
#   native    POST /invocations, bench/gateway/body-4k.json (4,028 bytes); upstream nginx
#   chat-4k   POST /v1/chat/completions, bench/gateway/chat-4k.json (OpenAI chat: system prompt
#             and user message, 4,030 bytes); upstream nginx
#   chat-32k  the same with bench/gateway/chat-32k.json (32,661 bytes)
#   stream    POST /v1/chat/completions, bench/gateway/chat-stream.json ("stream": true); upstream
#             sse_upstream (src/bench/): text/event-stream, 256 events, each its own chunk
# The nginx upstream answers {"ok":true} on 3 ports (one worker); sse_upstream streams on 3 ports.
# Both proxies get the same thread count (--threads, default 1) and are pinned to one CPU; the
# client (wrk, sse_probe) and the upstreams share the other CPU. Loopback only; every load run is
# bounded in time. The proxies are restarted for each route.
#
# Reports per route, as the median over --rounds interleaved rounds (direct, prefix-router,
# haproxy, ...):
#   latency at concurrency 1 (wrk -t1 -c1): p50, p99 and the latency each proxy adds over direct
#   (stream: the time to the last event of an unpaced 256-event answer; added latency per event =
#   added p50 / 256);
#   peak at saturation (wrk -t1 -cC for each C of --connections, best C kept) in requests/s
#   (stream: events/s = answers/s x 256), as ratios to direct and to HAProxy;
#   stream only: each event's delay from the upstream's write to the client's read (sse_probe,
#   one connection, events --stream-gap-us apart so that each is relayed alone), p50/p90/p99.
# Then CPU per proxied request with one I/O thread against two (native route, both threads on the
# proxy's CPU, a fixed load below saturation: wrk -c--cpu-connections, each connection pausing
# 2 ms after each answer), from `perf stat -e task-clock` on the proxy process (and /proc), for
# prefix-router (--io-threads 1 and 2) and HAProxy (nbthread 1 and 2). This machine has 2 cores,
# one of which runs the client and upstream, so a two-thread peak is not measured here.
# Prints markdown tables; writes raw outputs, logs, configs and summary.json to the output
# directory (default build/release/bench-results/gateway, or $OUT_DIR, or --out DIR).
#
# Usage: scripts/bench-gateway.sh [--quick] [--routes native,chat-4k,chat-32k,stream]
#                                 [--threads T] [--duration S] [--rounds R]
#                                 [--connections 16,64,128] [--stream-gap-us 1000]
#                                 [--cpu-connections 8] [--out DIR] [--busy-retries N]
#                                 [--port-base 19080]
#        (after scripts/setup.sh and scripts/build.sh release, which builds prefix-router,
#        sse_upstream and sse_probe)
# --quick: 1 s runs, 1 round, 64 connections, no warm-up: a smoke run of every check and table
# (under a minute for all routes), not a measurement. --cpu-connections 0 skips the CPU
# comparison. --port-base B moves every port (prefix-router B, HAProxy B+1, ..., upstreams
# B+21.. and B+31..), for a machine where 19080-19113 are taken.
# The machine has to be otherwise idle: each run measures the CPU that other processes used
# meanwhile and repeats a run where they took over 25% of a CPU (after 10, 20, 30 s; up to
# --busy-retries times, default 3, and 8 x that in all). Medians use only the runs that were not
# busy when there are any; the summary flags the rest.
# Exits non-zero if a check fails or any load run saw errors (socket errors, non-2xx, a
# malformed stream, or not one answer completed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

threads=1
duration=10
rounds=3
connections=16,64,128
routes=native,chat-4k,chat-32k,stream
stream_gap_us=1000
cpu_connections=8
cpu_pause_ms=2
events=256
quick=0
busy_retries=3   # a run during which other processes used over busy_limit% of a CPU is repeated
busy_limit=25
out=${OUT_DIR:-build/release/bench-results/gateway}
prefix=1024
bin=${PREFIX_ROUTER_BIN:-build/release/src/prefix-router}
model=bench-model
port_base=19080
names=(a b c)   # instance / server names, same in both proxies

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --routes) routes=$2; shift ;;
    --threads) threads=$2; shift ;;
    --duration) duration=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --connections) connections=$2; shift ;;
    --stream-gap-us) stream_gap_us=$2; shift ;;
    --cpu-connections) cpu_connections=$2; shift ;;
    --out) out=$2; shift ;;
    --busy-retries) busy_retries=$2; shift ;;
    --port-base) port_base=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-gateway: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
if [ $quick = 1 ]; then
  duration=1; rounds=1; connections=64
fi
case "$threads$duration$rounds$busy_retries$stream_gap_us$cpu_connections$port_base" in *[!0-9]*) echo "bench-gateway: --threads, --duration, --rounds, --busy-retries, --stream-gap-us, --cpu-connections and --port-base take whole numbers" >&2; exit 2 ;; esac
[ "$port_base" -ge 1024 ] && [ "$port_base" -le 65000 ] || { echo "bench-gateway: --port-base must be in 1024..65000" >&2; exit 2; }
# Ports (loopback), from --port-base B: prefix-router B, HAProxy B+1 (stats B+9); the CPU
# comparison's proxies B+2..B+5 (stats B+10, B+11); nginx B+21..B+23; sse_upstream B+31..B+33.
b=$port_base
up_ports=($((b + 21)) $((b + 22)) $((b + 23)))
sse_ports=($((b + 31)) $((b + 32)) $((b + 33)))
pr_port=$b
hp_port=$((b + 1))
hp_stats_port=$((b + 9))
cpu_pr_ports=($((b + 2)) $((b + 3)))
cpu_hp_ports=($((b + 4)) $((b + 5)))
cpu_hp_stats_ports=($((b + 10)) $((b + 11)))
[ "$threads" -ge 1 ] && [ "$duration" -ge 1 ] && [ "$rounds" -ge 1 ] || { echo "bench-gateway: --threads, --duration and --rounds must be >= 1" >&2; exit 2; }
[ "$stream_gap_us" -ge 1 ] || { echo "bench-gateway: --stream-gap-us must be >= 1" >&2; exit 2; }
IFS=, read -r -a conns <<< "$connections"
IFS=, read -r -a route_list <<< "$routes"
for r in "${route_list[@]}"; do
  case "$r" in native|chat-4k|chat-32k|stream) ;; *) echo "bench-gateway: unknown route '$r' (native, chat-4k, chat-32k, stream)" >&2; exit 2 ;; esac
done
warm=$(( duration < 2 ? duration : 2 ))
[ $quick = 1 ] && warm=0   # a smoke run: no warm-up

declare -A route_path=([native]=/invocations [chat-4k]=/v1/chat/completions [chat-32k]=/v1/chat/completions
                       [stream]=/v1/chat/completions)
declare -A route_body=([native]=body-4k.json [chat-4k]=chat-4k.json [chat-32k]=chat-32k.json
                       [stream]=chat-stream.json)

bin_dir=$(dirname "$bin")
sse_upstream=${SSE_UPSTREAM_BIN:-$bin_dir/sse_upstream}
sse_probe=${SSE_PROBE_BIN:-$bin_dir/sse_probe}
for tool in wrk nginx haproxy curl python3 taskset; do
  command -v "$tool" >/dev/null 2>&1 || { echo "bench-gateway: $tool not found: run scripts/setup.sh" >&2; exit 1; }
done
[ -x "$bin" ] || { echo "bench-gateway: $bin not found: run scripts/build.sh release" >&2; exit 1; }
if [[ ",$routes," == *,stream,* ]]; then
  [ -x "$sse_upstream" ] && [ -x "$sse_probe" ] || { echo "bench-gateway: sse_upstream and sse_probe not found beside $bin: run scripts/build.sh release (or cmake --build build/release --target sse_upstream sse_probe)" >&2; exit 1; }
fi
# CPU per request: perf's task-clock if perf may count here, else /proc's clock ticks alone.
use_perf=0
if [ "$cpu_connections" -gt 0 ] && command -v perf >/dev/null 2>&1 \
   && perf stat -e task-clock -x, -o /dev/null -- true >/dev/null 2>&1; then
  use_perf=1
fi

# CPU placement: proxy alone on one CPU, load generator and upstream on another. PROXY_CPU and
# LOAD_CPU override them (taskset -c lists; with --threads above 1 give the proxy that many CPUs
# on a bigger machine: on 2 cores its threads share CPU 1).
ncpu=$(nproc)
if [ "$ncpu" -ge 2 ]; then
  load_cpu=${LOAD_CPU:-0}; proxy_cpu=${PROXY_CPU:-1}
  pin_load=(taskset -c "$load_cpu"); pin_proxy=(taskset -c "$proxy_cpu")
  placement="proxy on CPU $proxy_cpu; client and upstream on CPU $load_cpu"
else
  pin_load=(); pin_proxy=()
  placement="1 CPU: no pinning"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/wrk-*.txt "$out"/probe-*.txt "$out"/check-*.txt "$out"/*.log "$out"/prefix-router-metrics*.txt \
  "$out"/prefix-router*.cmd "$out"/haproxy*.cfg "$out"/haproxy-stats*.csv "$out"/summary.json \
  "$out"/results.jsonl "$out"/perf-*.txt "$out"/meta.json
run=$(mktemp -d /tmp/bench-gateway.XXXXXX)
pids=()

stop_pid() {  # stop_pid PID: TERM, then KILL after 5 s
  local pid=$1 keep=() p
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$run"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

die() { echo "bench-gateway: $*" >&2; exit 1; }

# Refuse to start if a port is taken (a leftover server would be measured instead of ours).
python3 - "${up_ports[@]}" "${sse_ports[@]}" "$pr_port" "$hp_port" "$hp_stats_port" "${cpu_pr_ports[@]}" \
  "${cpu_hp_ports[@]}" "${cpu_hp_stats_ports[@]}" <<'PY' || die "a benchmark port is in use (see above)"
import socket, sys
bad = []
for p in map(int, sys.argv[1:]):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try: s.bind(("127.0.0.1", p))
    except OSError: bad.append(p)
    finally: s.close()
if bad: print("ports in use:", *bad, file=sys.stderr); sys.exit(1)
PY

# Warn when the machine is already busy (a build, another benchmark): every number would suffer.
python3 - <<'PY' >&2
import time
def busy():
    v = list(map(int, open("/proc/stat").readline().split()[1:9]))
    return sum(v) - v[3] - v[4] - v[7], sum(v)
b0, t0 = busy(); time.sleep(1); b1, t1 = busy()
pct = 100 * (b1 - b0) / max(1, t1 - t0)
if pct > 10:
    print(f"bench-gateway: WARNING: the machine is {pct:.0f}% busy before the benchmark starts "
          "(other processes); expect noisy numbers")
PY

lua=$root/bench/gateway/post.lua
helper=$root/bench/gateway/bench_gateway.py

# ---- upstreams: nginx (fixed JSON answer) and sse_upstream (streams)
servers=""
for p in "${up_ports[@]}"; do
  servers+="    server {
        listen 127.0.0.1:$p backlog=4096;
        location / { return 200 '{\"ok\":true}'; }
    }
"
done
mkdir -p "$run/client_body" "$run/proxy" "$run/fastcgi" "$run/uwsgi" "$run/scgi"
python3 - "$root/bench/gateway/nginx-upstream.conf.in" "$run/nginx.conf" "$run" "$servers" "$out/nginx-error.log" <<'PY'
import sys
src, dst, rundir, servers, errlog = sys.argv[1:]
t = open(src).read().replace("@RUNDIR@", rundir).replace("@ERRORLOG@", errlog)
t = t.replace("@PORTS_SERVERS@", servers.rstrip("\n"))
open(dst, "w").write(t)
PY
cp "$run/nginx.conf" "$out/nginx.conf"
nginx -t -p "$run" -c "$run/nginx.conf" -e "$out/nginx-error.log" >"$out/nginx-check.log" 2>&1 \
  || { cat "$out/nginx-check.log" >&2; die "nginx rejected its config"; }

# haproxy_config NAME PORT STATS_PORT THREADS UPSTREAM_PORT...: writes and checks $out/haproxy-NAME.cfg
haproxy_config() {
  local name=$1 port=$2 stats=$3 nthreads=$4; shift 4
  local servers="" i=0 p stream_options=""
  for p in "$@"; do servers+="    server ${names[$i]} 127.0.0.1:$p"$'\n'; i=$((i + 1)); done
  [ "$name" = stream ] && stream_options="    option http-no-delay     # relay each event at once (see the top)"
  python3 - "$root/bench/gateway/haproxy.cfg.in" "$out/haproxy-$name.cfg" "$run/haproxy-$name" "$nthreads" \
    "$prefix" "$port" "$stats" "$servers" "$stream_options" <<'PY'
import sys
src, dst, pidbase, threads, prefix, port, stats, servers, stream_options = sys.argv[1:]
t = open(src).read()
for k, v in {"@RUNDIR@/haproxy.pid": pidbase + ".pid", "@THREADS@": threads, "@PREFIX@": prefix,
             "@PORT@": port, "@STATS_PORT@": stats, "@SERVERS@": servers.rstrip("\n"),
             "@STREAM_OPTIONS@\n": stream_options + "\n" if stream_options else ""}.items():
    t = t.replace(k, v)
open(dst, "w").write(t)
PY
  haproxy -c -f "$out/haproxy-$name.cfg" >"$out/haproxy-$name-check.log" 2>&1 \
    || { cat "$out/haproxy-$name-check.log" >&2; die "haproxy rejected its config ($out/haproxy-$name.cfg)"; }
}

# Run a copy, so a rebuild of build/release during the run changes nothing.
cp "$bin" "$run/prefix-router"
pr_version="$("$bin" --version 2>&1 | head -1)"
pr_built="$(date -r "$bin" -Iseconds)"
pr_commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo +local-changes)"

alive() {  # alive NAME PID LOG
  kill -0 "$2" 2>/dev/null && return 0
  echo "bench-gateway: $1 (pid $2) is not running; last lines of $3:" >&2
  tail -n 30 "$3" >&2 || true
  exit 1
}
wait_up() {  # wait_up NAME PID LOG URL
  for _ in $(seq 100); do
    alive "$1" "$2" "$3"
    curl -s -o /dev/null --max-time 1 "$4" && return 0
    sleep 0.1
  done
  die "$1 did not answer at $4 within 10 s"
}

# start_prefix_router NAME PORT THREADS UPSTREAM_PORT...: sets started_pid
start_prefix_router() {
  local name=$1 port=$2 nthreads=$3; shift 3
  local args=(serve --listen "127.0.0.1:$port" --io-threads "$nthreads" --strategy prefix-aware
              --prefix-length "$prefix" --health-interval 0 --drain-timeout 2) i=0 p
  for p in "$@"; do args+=(--instance "${names[$i]}=http://127.0.0.1:$p;models=$model"); i=$((i + 1)); done
  echo "$bin ${args[*]}" > "$out/prefix-router-$name.cmd"
  "${pin_proxy[@]}" "$run/prefix-router" "${args[@]}" >"$out/prefix-router-$name.log" 2>&1 &
  started_pid=$!; pids+=("$started_pid")
  wait_up prefix-router "$started_pid" "$out/prefix-router-$name.log" "http://127.0.0.1:$port/health"
}
# start_haproxy NAME PORT STATS_PORT THREADS UPSTREAM_PORT...: sets started_pid
start_haproxy() {
  local name=$1 port=$2 stats=$3
  haproxy_config "$@"
  "${pin_proxy[@]}" haproxy -db -f "$out/haproxy-$name.cfg" >"$out/haproxy-$name.log" 2>&1 &
  started_pid=$!; pids+=("$started_pid")
  wait_up haproxy "$started_pid" "$out/haproxy-$name.log" "http://127.0.0.1:$stats/stats"
}

"${pin_load[@]}" nginx -p "$run" -c "$run/nginx.conf" -e "$out/nginx-error.log" >"$out/nginx.stdout.log" 2>&1 &
nginx_pid=$!; pids+=("$nginx_pid")
for p in "${up_ports[@]}"; do wait_up nginx "$nginx_pid" "$out/nginx-error.log" "http://127.0.0.1:$p/health"; done
nginx_worker=$(pgrep -P "$nginx_pid" | head -1 || true)
sse_pid=
if [[ ",$routes," == *,stream,* ]]; then
  sse_args=(--events "$events" --model "$model")
  for p in "${sse_ports[@]}"; do sse_args+=(--port "$p"); done
  "${pin_load[@]}" "$sse_upstream" "${sse_args[@]}" >"$out/sse-upstream.log" 2>&1 &
  sse_pid=$!; pids+=("$sse_pid")
  for p in "${sse_ports[@]}"; do wait_up sse_upstream "$sse_pid" "$out/sse-upstream.log" "http://127.0.0.1:$p/health"; done
fi

# ---- load runs
errors=0
repeats=0   # all repeats so far: at most 8 x --busy-retries in one invocation
: > "$out/results.jsonl"
declare -A url tpid tlog tport
watch=()    # LABEL:PID of the processes whose CPU each run records
route=
snap() {  # snap NAME: CPU counters of the machine and of the watched processes
  cat /proc/stat > "$run/stat.$1"
  local x
  for x in "${watch[@]}"; do
    cat "/proc/${x#*:}/stat" > "$run/pstat.${x%%:*}.$1" 2>/dev/null || echo > "$run/pstat.${x%%:*}.$1"
  done
}
labels() { local x l=(); for x in "${watch[@]}"; do l+=("${x%%:*}"); done; (IFS=,; echo "${l[*]}"); }

load_run() {  # load_run TARGET PHASE CONNS DURATION ROUND: one run, repeated while the machine is busy
  local t=$1 phase=$2 c=$3 d=$4 r=$5 attempt=0 rc
  while :; do
    rc=0
    load_once "$t" "$phase" "$c" "$d" "$r" "$attempt" || rc=$?
    if [ "$rc" = 4 ] && [ "$attempt" -lt "$busy_retries" ] && [ "$repeats" -lt $((busy_retries * 8)) ]; then
      attempt=$((attempt + 1)); repeats=$((repeats + 1))
      echo "bench-gateway: other processes used over ${busy_limit}% of a CPU during the $route $phase run against $t (c=$c); repeating it in $((10 * attempt)) s ($attempt/$busy_retries)" >&2
      sleep $((10 * attempt))
      continue
    fi
    [ "$r" = warmup ] || [ ! -s "$run/line.json" ] || cat "$run/line.json" >> "$out/results.jsonl"
    return 0
  done
}
load_once() {  # load_once TARGET PHASE CONNS DURATION ROUND ATTEMPT; returns 4 if the machine was busy
  local t=$1 phase=$2 c=$3 d=$4 r=$5 attempt=$6 perf_pid='' kind=wrk
  [ "$phase" = event-delay ] && kind=probe
  local f="$out/$kind-$route-$phase-$t-c$c-r$r.txt"
  [ "$attempt" = 0 ] || f="$out/$kind-$route-$phase-$t-c$c-r$r-retry$attempt.txt"
  : > "$run/line.json"
  rm -f "$run/perf.txt"
  snap before
  times > "$run/times.before"   # CPU used by this shell's children so far: the client's is the delta
  if [ "$phase" = cpu ] && [ "$use_perf" = 1 ]; then
    perf stat -e task-clock -x, -o "$run/perf.txt" -p "${tpid[$t]}" >/dev/null 2>&1 &
    perf_pid=$!
    sleep 0.2   # perf attached before the load starts
  fi
  local rc=0
  case "$phase" in
    event-delay)
      "${pin_load[@]}" "$sse_probe" --port "${tport[$t]}" --path "${route_path[$route]}" --body "$BODY_FILE" \
        --events "$events" --gap-us "$stream_gap_us" --duration "$d" >"$f" 2>&1 || rc=$? ;;
    cpu)
      WRK_DELAY_MS=$cpu_pause_ms "${pin_load[@]}" wrk -t1 -c"$c" -d"${d}s" --latency -s "$lua" "${url[$t]}" >"$f" 2>&1 || rc=$? ;;
    *)
      "${pin_load[@]}" wrk -t1 -c"$c" -d"${d}s" --latency -s "$lua" "${url[$t]}" >"$f" 2>&1 || rc=$? ;;
  esac
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
    cp "$run/perf.txt" "$out/perf-$route-$t-r$r.txt" 2>/dev/null || true
  fi
  times > "$run/times.after"
  snap after
  alive "$t" "${tpid[$t]}" "${tlog[$t]}"
  if [ "$rc" != 0 ]; then
    cat "$f" >&2
    if [ "$kind" = probe ]; then   # a malformed or incomplete stream: an error, as wrk's non-2xx
      echo "bench-gateway: ERRORS in $route $phase run against $t (round $r): sse_probe failed (see $f)" >&2
      errors=$((errors + 1))
      return 0
    fi
    die "wrk failed against $t"
  fi
  [ "$r" = warmup ] && return 0
  rc=0
  python3 "$helper" line "$f" "$run" route="$route" target="$t" phase="$phase" connections="$c" round="$r" \
    attempt="$attempt" busy_limit="$busy_limit" labels="$(labels)" target_label="$t" > "$run/line.json" || rc=$?
  if [ "$rc" = 3 ]; then
    echo "bench-gateway: ERRORS in $route $phase run against $t (c=$c, round $r):" >&2
    grep -E 'Socket errors|Non-2xx' "$f" >&2 || true
    tail -n 5 "${tlog[$t]}" >&2 || true
    errors=$((errors + 1))
    return 0
  elif [ "$rc" != 0 ] && [ "$rc" != 4 ]; then
    die "could not summarise $f"
  fi
  return "$rc"
}

# check TARGET: the path answers as the upstream does (a stream: 256 events through sse_probe)
check() {
  local t=$1 code got
  if [ "$route" = stream ]; then
    if ! "$sse_probe" --port "${tport[$t]}" --path "${route_path[$route]}" --body "$BODY_FILE" --events "$events" \
         --requests 2 >"$out/check-$route-$t.txt" 2>&1; then
      cat "$out/check-$route-$t.txt" >&2
      alive "$t" "${tpid[$t]}" "${tlog[$t]}"
      die "check failed for $t (${url[$t]}): not a $events-event stream"
    fi
    return 0
  fi
  code=$(curl -s -o "$run/check.body" -D "$out/check-$route-$t.headers.txt" -w '%{http_code}' --max-time 5 \
    -X POST -H 'Content-Type: application/json' --data-binary "@$BODY_FILE" "${url[$t]}") || code=curl-failed
  got=$(cat "$run/check.body" 2>/dev/null || true)
  if [ "$code" != 200 ] || [ "$got" != '{"ok":true}' ]; then
    echo "bench-gateway: check failed for $t (${url[$t]}): status $code, body: $got" >&2
    cat "$out/check-$route-$t.headers.txt" >&2 2>/dev/null || true
    alive "$t" "${tpid[$t]}" "${tlog[$t]}"
    exit 1
  fi
}

start=$(date +%s)
echo "bench-gateway: routes=$routes threads=$threads duration=${duration}s rounds=$rounds connections=${connections} ($placement)" >&2
targets=(direct prefix-router haproxy)
for route in "${route_list[@]}"; do
  export BODY_FILE=$root/bench/gateway/${route_body[$route]}
  if [ "$route" = stream ]; then ups=("${sse_ports[@]}"); up_pid=$sse_pid; up_log=$out/sse-upstream.log
  else ups=("${up_ports[@]}"); up_pid=$nginx_worker; up_log=$out/nginx-error.log; fi
  start_prefix_router "$route" "$pr_port" "$threads" "${ups[@]}"; pr_pid=$started_pid
  start_haproxy "$route" "$hp_port" "$hp_stats_port" "$threads" "${ups[@]}"; hp_pid=$started_pid
  url=([direct]="http://127.0.0.1:${ups[0]}${route_path[$route]}"
       [prefix-router]="http://127.0.0.1:$pr_port${route_path[$route]}"
       [haproxy]="http://127.0.0.1:$hp_port${route_path[$route]}")
  tport=([direct]=${ups[0]} [prefix-router]=$pr_port [haproxy]=$hp_port)
  tpid=([direct]=${up_pid:-$nginx_pid} [prefix-router]=$pr_pid [haproxy]=$hp_pid)
  tlog=([direct]=$up_log [prefix-router]="$out/prefix-router-$route.log" [haproxy]="$out/haproxy-$route.log")
  watch=("prefix-router:$pr_pid" "haproxy:$hp_pid" "upstream:${up_pid:-$nginx_pid}")
  for t in "${targets[@]}"; do check "$t"; done
  echo "bench-gateway: $route: checks passed: direct, prefix-router and haproxy answer as the upstream" >&2
  [ "$warm" = 0 ] || for t in "${targets[@]}"; do load_run "$t" warmup 16 "$warm" warmup; done
  for r in $(seq "$rounds"); do
    echo "bench-gateway: $route: latency at concurrency 1, round $r/$rounds" >&2
    for t in "${targets[@]}"; do load_run "$t" latency 1 "$duration" "$r"; done
  done
  if [ "$route" = stream ]; then
    for r in $(seq "$rounds"); do
      echo "bench-gateway: $route: event delay (events ${stream_gap_us} us apart), round $r/$rounds" >&2
      for t in "${targets[@]}"; do load_run "$t" event-delay 1 "$duration" "$r"; done
    done
  fi
  for c in "${conns[@]}"; do
    for r in $(seq "$rounds"); do
      echo "bench-gateway: $route: throughput at $c connections, round $r/$rounds" >&2
      for t in "${targets[@]}"; do load_run "$t" peak "$c" "$duration" "$r"; done
    done
  done
  curl -s --max-time 5 "http://127.0.0.1:$pr_port/metrics" > "$out/prefix-router-metrics-$route.txt" || true
  curl -s --max-time 5 "http://127.0.0.1:$hp_stats_port/stats;csv" > "$out/haproxy-stats-$route.csv" || true
  stop_pid "$pr_pid"
  stop_pid "$hp_pid"
done

# ---- CPU per request: one I/O thread against two, at a fixed load below saturation
if [ "$cpu_connections" -gt 0 ]; then
  route=cpu
  export BODY_FILE=$root/bench/gateway/body-4k.json
  cpu_targets=(prefix-router-1t prefix-router-2t haproxy-1t haproxy-2t)
  watch=()
  for n in 1 2; do
    start_prefix_router "cpu-${n}t" "${cpu_pr_ports[$((n - 1))]}" "$n" "${up_ports[@]}"
    t=prefix-router-${n}t; tpid[$t]=$started_pid; tlog[$t]="$out/prefix-router-cpu-${n}t.log"
    url[$t]="http://127.0.0.1:${cpu_pr_ports[$((n - 1))]}/invocations"; watch+=("$t:$started_pid")
    start_haproxy "cpu-${n}t" "${cpu_hp_ports[$((n - 1))]}" "${cpu_hp_stats_ports[$((n - 1))]}" "$n" "${up_ports[@]}"
    t=haproxy-${n}t; tpid[$t]=$started_pid; tlog[$t]="$out/haproxy-cpu-${n}t.log"
    url[$t]="http://127.0.0.1:${cpu_hp_ports[$((n - 1))]}/invocations"; watch+=("$t:$started_pid")
  done
  watch+=("upstream:$nginx_worker")
  for t in "${cpu_targets[@]}"; do check "$t"; done
  echo "bench-gateway: cpu: checks passed; $( [ $use_perf = 1 ] && echo 'perf stat' || echo '/proc only (perf stat cannot count here)' )" >&2
  [ "$warm" = 0 ] || for t in "${cpu_targets[@]}"; do load_run "$t" warmup 16 "$warm" warmup; done
  for r in $(seq "$rounds"); do
    echo "bench-gateway: cpu: CPU per request at a fixed load (wrk -c$cpu_connections, ${cpu_pause_ms} ms pauses), round $r/$rounds" >&2
    for t in "${cpu_targets[@]}"; do load_run "$t" cpu "$cpu_connections" "$duration" "$r"; done
  done
fi
elapsed=$(( $(date +%s) - start ))

# ---- summary
hp_version=$(haproxy -v 2>&1 | head -1 || true)
ng_version=$(nginx -v 2>&1 || true)
wrk_version=$(wrk -v 2>&1 | head -1 || true)   # wrk -v exits 1
meta=(routes="$routes" threads="$threads" duration="$duration" rounds="$rounds" prefix="$prefix"
      placement="$placement" elapsed_s="$elapsed" errors="$errors" events="$events"
      stream_gap_us="$stream_gap_us" cpu_connections="$cpu_connections" cpu_pause_ms="$cpu_pause_ms"
      cpu_perf="$use_perf" load_cpu="${load_cpu:-}" proxy_cpu="${proxy_cpu:-}" busy_limit="$busy_limit"
      prefix_router_version="$pr_version" commit="$pr_commit" binary_built="$pr_built"
      haproxy_version="$hp_version" nginx_version="$ng_version" wrk_version="$wrk_version")
for r in native chat-4k chat-32k stream; do meta+=("body_bytes_$r=$(stat -c %s "$root/bench/gateway/${route_body[$r]}")"); done
python3 "$helper" meta "${meta[@]}" > "$out/meta.json"
python3 "$helper" summary "$out" "$out/meta.json"
echo >&2
echo "bench-gateway: load runs took ${elapsed} s; raw outputs, configs and summary.json in $out" >&2
[ "$errors" = 0 ] || die "$errors load run(s) had errors"
