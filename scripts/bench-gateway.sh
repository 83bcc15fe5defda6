#!/usr/bin/env bash
# Measures what the gateway adds on the native route, in one run, against a trivial fast upstream
# and against Debian's HAProxy 2.6 configured as the equivalent balancer:
#   direct      wrk -> nginx (one instance port)
#   prefix-router  wrk -> prefix-router serve --strategy prefix-aware --prefix-length 1024 -> nginx
#   haproxy     wrk -> HAProxy (balance hash req.body,bytes(0,1024), hash-type consistent,
#               hash-balance-factor 150, option http-buffer-request) -> nginx
# Every request is POST /invocations with the fixed 4 KiB JSON body bench/gateway/body-4k.json.
# Both proxies get the same thread count (--threads, default 1) and are pinned to one CPU; wrk and
# the nginx upstream (3 ports, one worker) share the other CPU. Loopback only; every load run is
# bounded by wrk -d.
#
# Reports, as the median over --rounds interleaved rounds (direct, prefix-router, haproxy, ...):
#   latency at concurrency 1 (wrk -t1 -c1): p50, p99 and the latency each proxy adds over direct;
#   peak requests/s at saturation (wrk -t1 -cC for each C of --connections, best C kept), as
#   ratios to direct and to HAProxy.
# Prints a markdown table; writes raw wrk outputs, logs, configs and summary.json to the output
# directory (default build/release/bench-results/gateway, or $OUT_DIR, or --out DIR).
#
# Usage: scripts/bench-gateway.sh [--quick] [--threads T] [--duration S] [--rounds R]
#                                 [--connections 16,64,128] [--out DIR]
#                                 [--busy-retries N]
#        (after scripts/setup.sh and scripts/build.sh release)
# The machine has to be otherwise idle: each run measures the CPU that other processes used
# meanwhile and repeats a run where they took over 25% of a CPU (after 10, 20, 30 s; up to
# --busy-retries times, default 3, and 8 x that in all). Medians use only the runs that were not
# busy when there are any; the summary flags the rest.
# Exits non-zero if a check fails or any load run saw errors (socket errors or non-2xx).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

threads=1
duration=10
rounds=3
connections=16,64,128
quick=0
busy_retries=3   # a run during which other processes used over busy_limit% of a CPU is repeated
busy_limit=25
out=${OUT_DIR:-build/release/bench-results/gateway}
prefix=1024
bin=${PREFIX_ROUTER_BIN:-build/release/src/prefix-router}
# Ports (loopback): upstreams, prefix-router, haproxy, haproxy stats.
up_ports=(19101 19102 19103)
names=(a b c)   # instance / server names, same in both proxies
pr_port=19080
hp_port=19081
hp_stats_port=19089

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --threads) threads=$2; shift ;;
    --duration) duration=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --connections) connections=$2; shift ;;
    --out) out=$2; shift ;;
    --busy-retries) busy_retries=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-gateway: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
if [ $quick = 1 ]; then
  duration=3; rounds=1; connections=64
fi
case "$threads$duration$rounds$busy_retries" in *[!0-9]*) echo "bench-gateway: --threads, --duration and --rounds and --busy-retries take whole numbers" >&2; exit 2 ;; esac
[ "$threads" -ge 1 ] && [ "$duration" -ge 1 ] && [ "$rounds" -ge 1 ] || { echo "bench-gateway: --threads, --duration and --rounds must be >= 1" >&2; exit 2; }
IFS=, read -r -a conns <<< "$connections"
warm=$(( duration < 2 ? duration : 2 ))

for tool in wrk nginx haproxy curl python3 taskset; do
  command -v "$tool" >/dev/null 2>&1 || { echo "bench-gateway: $tool not found: run scripts/setup.sh" >&2; exit 1; }
done
[ -x "$bin" ] || { echo "bench-gateway: $bin not found: run scripts/build.sh release" >&2; exit 1; }

# CPU placement: proxy alone on one CPU, load generator and upstream on another. PROXY_CPU and
# LOAD_CPU override them (taskset -c lists; with --threads above 1 give the proxy that many CPUs
# on a bigger machine: on 2 cores its threads share CPU 1).
ncpu=$(nproc)
if [ "$ncpu" -ge 2 ]; then
  load_cpu=${LOAD_CPU:-0}; proxy_cpu=${PROXY_CPU:-1}
  pin_load=(taskset -c "$load_cpu"); pin_proxy=(taskset -c "$proxy_cpu")
  placement="proxy on CPU $proxy_cpu; wrk and nginx on CPU $load_cpu"
else
  pin_load=(); pin_proxy=()
  placement="1 CPU: no pinning"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/wrk-*.txt "$out"/check-*.txt "$out"/*.log "$out"/prefix-router-metrics.txt \
  "$out"/prefix-router.cmd "$out"/haproxy-stats.csv "$out"/summary.json "$out"/results.jsonl
run=$(mktemp -d /tmp/bench-gateway.XXXXXX)
pids=()

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
python3 - "${up_ports[@]}" "$pr_port" "$hp_port" "$hp_stats_port" <<'PY' || die "a benchmark port is in use (see above)"
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

body_file=$root/bench/gateway/body-4k.json
lua=$root/bench/gateway/post.lua
export BODY_FILE=$body_file

# ---- configs
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
hp_servers=""
for i in "${!up_ports[@]}"; do
  hp_servers+="    server ${names[$i]} 127.0.0.1:${up_ports[$i]}"$'\n'
done
python3 - "$root/bench/gateway/haproxy.cfg.in" "$run/haproxy.cfg" "$run" "$threads" "$prefix" "$hp_port" "$hp_stats_port" "$hp_servers" <<'PY'
import sys
src, dst, rundir, threads, prefix, port, stats, servers = sys.argv[1:]
t = open(src).read()
for k, v in {"@RUNDIR@": rundir, "@THREADS@": threads, "@PREFIX@": prefix, "@PORT@": port,
             "@STATS_PORT@": stats, "@SERVERS@": servers.rstrip("\n")}.items():
    t = t.replace(k, v)
open(dst, "w").write(t)
PY
cp "$run/nginx.conf" "$out/nginx.conf"
cp "$run/haproxy.cfg" "$out/haproxy.cfg"

nginx -t -p "$run" -c "$run/nginx.conf" -e "$out/nginx-error.log" >"$out/nginx-check.log" 2>&1 \
  || { cat "$out/nginx-check.log" >&2; die "nginx rejected its config"; }
haproxy -c -f "$run/haproxy.cfg" >"$out/haproxy-check.log" 2>&1 \
  || { cat "$out/haproxy-check.log" >&2; die "haproxy rejected its config ($out/haproxy.cfg)"; }

# Run a copy, so a rebuild of build/release during the run changes nothing.
cp "$bin" "$run/prefix-router"
pr_version="$("$bin" --version 2>&1 | head -1)"
pr_built="$(date -r "$bin" -Iseconds)"
pr_commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo +local-changes)"
pr_args=(serve --listen "127.0.0.1:$pr_port" --io-threads "$threads" --strategy prefix-aware
         --prefix-length "$prefix" --health-interval 0)
for i in "${!up_ports[@]}"; do
  pr_args+=(--instance "${names[$i]}=http://127.0.0.1:${up_ports[$i]}")
done
echo "$bin ${pr_args[*]}" > "$out/prefix-router.cmd"

# ---- start servers
"${pin_load[@]}" nginx -p "$run" -c "$run/nginx.conf" -e "$out/nginx-error.log" \
  >"$out/nginx.stdout.log" 2>&1 &
pids+=($!); nginx_pid=$!
"${pin_proxy[@]}" "$run/prefix-router" "${pr_args[@]}" >"$out/prefix-router.log" 2>&1 &
pids+=($!); pr_pid=$!
"${pin_proxy[@]}" haproxy -db -f "$run/haproxy.cfg" >"$out/haproxy.stdout.log" 2>&1 &
pids+=($!); hp_pid=$!

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
wait_up nginx "$nginx_pid" "$out/nginx-error.log" "http://127.0.0.1:${up_ports[0]}/health"
for p in "${up_ports[@]}"; do wait_up nginx "$nginx_pid" "$out/nginx-error.log" "http://127.0.0.1:$p/health"; done
wait_up prefix-router "$pr_pid" "$out/prefix-router.log" "http://127.0.0.1:$pr_port/health"
wait_up haproxy "$hp_pid" "$out/haproxy.stdout.log" "http://127.0.0.1:$hp_stats_port/stats"
nginx_worker=$(pgrep -P "$nginx_pid" | head -1 || true)

targets=(direct prefix-router haproxy)
declare -A url=(
  [direct]="http://127.0.0.1:${up_ports[0]}/invocations"
  [prefix-router]="http://127.0.0.1:$pr_port/invocations"
  [haproxy]="http://127.0.0.1:$hp_port/invocations"
)
declare -A tpid=([direct]=$nginx_pid [prefix-router]=$pr_pid [haproxy]=$hp_pid)
declare -A tlog=([direct]="$out/nginx-error.log" [prefix-router]="$out/prefix-router.log" [haproxy]="$out/haproxy.stdout.log")

# ---- correctness: each path answers 200 with the upstream's body
for t in "${targets[@]}"; do
  code=$(curl -s -o "$run/check.body" -D "$out/check-$t.headers.txt" -w '%{http_code}' --max-time 5 \
    -X POST -H 'Content-Type: application/json' --data-binary "@$body_file" "${url[$t]}") || code=curl-failed
  got=$(cat "$run/check.body" 2>/dev/null || true)
  if [ "$code" != 200 ] || [ "$got" != '{"ok":true}' ]; then
    echo "bench-gateway: check failed for $t (${url[$t]}): status $code, body: $got" >&2
    cat "$out/check-$t.headers.txt" >&2 2>/dev/null || true
    alive "$t" "${tpid[$t]}" "${tlog[$t]}"
    exit 1
  fi
done
echo "bench-gateway: checks passed: direct, prefix-router and haproxy answer 200 {\"ok\":true}" >&2

# ---- load runs
errors=0
busy_runs=0
repeats=0   # all repeats so far: at most 8 x --busy-retries in one invocation
: > "$out/results.jsonl"
snap() {  # snap NAME: CPU counters of the machine and of the three server processes
  cat /proc/stat > "$run/stat.$1"
  for x in "pr:$pr_pid" "hp:$hp_pid" "ng:$nginx_worker"; do
    cat "/proc/${x#*:}/stat" > "$run/pstat.${x%%:*}.$1" 2>/dev/null || echo > "$run/pstat.${x%%:*}.$1"
  done
}
wrk_run() {  # wrk_run TARGET PHASE CONNS DURATION ROUND: one load run, repeated while the machine is busy
  local t=$1 phase=$2 c=$3 d=$4 r=$5 attempt=0 rc
  while :; do
    rc=0
    wrk_once "$t" "$phase" "$c" "$d" "$r" "$attempt" || rc=$?
    if [ "$rc" = 4 ] && [ "$attempt" -lt "$busy_retries" ] && [ "$repeats" -lt $((busy_retries * 8)) ]; then
      attempt=$((attempt + 1)); repeats=$((repeats + 1))
      echo "bench-gateway: other processes used over ${busy_limit}% of a CPU during the $phase run against $t (c=$c); repeating it in $((10 * attempt)) s ($attempt/$busy_retries)" >&2
      sleep $((10 * attempt))
      continue
    fi
    [ "$r" = warmup ] && return 0
    cat "$run/line.json" >> "$out/results.jsonl"
    [ "$rc" = 4 ] && busy_runs=$((busy_runs + 1))
    return 0
  done
}
wrk_once() {  # wrk_once TARGET PHASE CONNS DURATION ROUND ATTEMPT; returns 4 if the machine was busy
  local t=$1 phase=$2 c=$3 d=$4 r=$5 attempt=$6
  local f="$out/wrk-$phase-$t-c$c-r$r.txt"
  [ "$attempt" = 0 ] || f="$out/wrk-$phase-$t-c$c-r$r-retry$attempt.txt"
  snap before
  times > "$run/times.before"   # CPU used by this shell's children so far: wrk's is the delta
  "${pin_load[@]}" wrk -t1 -c"$c" -d"${d}s" --latency -s "$lua" "${url[$t]}" >"$f" 2>&1 \
    || { cat "$f" >&2; alive "$t" "${tpid[$t]}" "${tlog[$t]}"; die "wrk failed against $t"; }
  times > "$run/times.after"
  snap after
  alive "$t" "${tpid[$t]}" "${tlog[$t]}"
  grep -q '^WRK_RESULT ' "$f" || { cat "$f" >&2; die "no WRK_RESULT in $f"; }
  [ "$r" = warmup ] && return 0
  # One JSON line: wrk's result plus CPU use over the run (busy % of each CPU, steal %, the %
  # of one CPU used by prefix-router, haproxy, the nginx worker and wrk, and what is left:
  # other processes on the machine, which make the run unreliable).
  local rc=0
  python3 - "$f" "$run" "$t" "$phase" "$c" "$r" "$attempt" "$busy_limit" > "$run/line.json" <<'PY' || rc=$?
import json, os, sys
f, run, t, phase, c, r, attempt, busy_limit = sys.argv[1:]
res = json.loads(next(l for l in open(f) if l.startswith("WRK_RESULT "))[len("WRK_RESULT "):])
def cpus(name):
    d = {}
    for line in open(f"{run}/stat.{name}"):
        if line.startswith("cpu") and line[3].isdigit():
            k, *v = line.split(); d[k] = list(map(int, v[:8]))
    return d
b, a = cpus("before"), cpus("after")
res["cpu_busy_pct"], res["cpu_steal_pct"] = {}, {}
for k in sorted(a):
    dv = [x - y for x, y in zip(a[k], b[k])]
    tot = sum(dv) or 1   # user nice system idle iowait irq softirq steal
    res["cpu_busy_pct"][k] = round(100 * (dv[0] + dv[1] + dv[2] + dv[5] + dv[6]) / tot, 1)
    res["cpu_steal_pct"][k] = round(100 * dv[7] / tot, 1)
hz = os.sysconf("SC_CLK_TCK"); secs = res["duration_us"] / 1e6
res["process_cpu_pct"] = {}
for p, name in (("pr", "prefix-router"), ("hp", "haproxy"), ("ng", "nginx-worker")):
    try:
        x = open(f"{run}/pstat.{p}.before").read(); y = open(f"{run}/pstat.{p}.after").read()
        tx = sum(map(int, x.rsplit(")", 1)[1].split()[11:13]))
        ty = sum(map(int, y.rsplit(")", 1)[1].split()[11:13]))
        res["process_cpu_pct"][name] = round(100 * (ty - tx) / hz / secs, 1)
    except (ValueError, IndexError):
        pass
def child_secs(name):  # second line of bash `times`: children's user and system time
    u, s_ = open(f"{run}/times.{name}").read().split("\n")[1].split()
    m = lambda v: int(v.split("m")[0]) * 60 + float(v.split("m")[1].rstrip("s"))
    return m(u) + m(s_)
res["process_cpu_pct"]["wrk"] = round(100 * (child_secs("after") - child_secs("before")) / secs, 1)
res["other_cpu_pct"] = round(max(0.0, sum(res["cpu_busy_pct"].values()) - sum(res["process_cpu_pct"].values())), 1)
res["busy"] = res["other_cpu_pct"] > float(busy_limit)
print(json.dumps({"target": t, "phase": phase, "connections": int(c), "round": int(r),
                  "attempt": int(attempt), "raw": os.path.basename(f), **res}))
if any(res["errors"].values()):
    sys.exit(3)
if res["busy"]:
    sys.exit(4)
PY
  if [ "$rc" = 3 ]; then
    echo "bench-gateway: ERRORS in $phase run against $t (c=$c, round $r):" >&2
    grep -E 'Socket errors|Non-2xx' "$f" >&2 || true
    tail -n 5 "${tlog[$t]}" >&2 || true
    errors=$((errors + 1))
    return 0
  elif [ "$rc" != 0 ] && [ "$rc" != 4 ]; then
    die "could not summarise $f"
  fi
  return "$rc"
}

start=$(date +%s)
echo "bench-gateway: threads=$threads duration=${duration}s rounds=$rounds connections=${connections} ($placement)" >&2
echo "bench-gateway: warm-up" >&2
for t in "${targets[@]}"; do wrk_run "$t" warmup 16 "$warm" warmup; done

for r in $(seq "$rounds"); do
  echo "bench-gateway: latency at concurrency 1, round $r/$rounds" >&2
  for t in "${targets[@]}"; do wrk_run "$t" latency 1 "$duration" "$r"; done
done
for c in "${conns[@]}"; do
  for r in $(seq "$rounds"); do
    echo "bench-gateway: throughput at $c connections, round $r/$rounds" >&2
    for t in "${targets[@]}"; do wrk_run "$t" peak "$c" "$duration" "$r"; done
  done
done
elapsed=$(( $(date +%s) - start ))

curl -s --max-time 5 "http://127.0.0.1:$pr_port/metrics" > "$out/prefix-router-metrics.txt" || true
curl -s --max-time 5 "http://127.0.0.1:$hp_stats_port/stats;csv" > "$out/haproxy-stats.csv" || true

# ---- summary
python3 - "$out" "$threads" "$duration" "$rounds" "$prefix" "$placement" "$elapsed" "$errors" \
  "$(haproxy -v | head -1)" "$(nginx -v 2>&1)" "$(wrk -v 2>&1 | head -1)" "$(stat -c %s "$body_file")" \
  "${load_cpu:-}" "${proxy_cpu:-}" "$pr_version" "$pr_commit" "$pr_built" "$busy_limit" <<'PY'
import csv, datetime, json, re, statistics, sys
(out, threads, duration, rounds, prefix, placement, elapsed, errors, hpv, ngv, wrkv, body,
 load_cpu, proxy_cpu, prv, commit, bin_mtime, busy_limit) = sys.argv[1:]
runs = [json.loads(l) for l in open(f"{out}/results.jsonl")]
targets = ["direct", "prefix-router", "haproxy"]
med = statistics.median

def median_run(rs):  # the run holding the median requests/s (lower middle for even counts)
    rs = sorted(rs, key=lambda j: j["rps"]); return rs[(len(rs) - 1) // 2]

def clean(rs):  # the runs during which the machine was otherwise idle, if there are any
    return [j for j in rs if not j.get("busy")] or rs

res = {}
for t in targets:
    lat = clean([j for j in runs if j["target"] == t and j["phase"] == "latency"])
    peak = {}
    for j in runs:
        if j["target"] == t and j["phase"] == "peak": peak.setdefault(j["connections"], []).append(j)
    peak = {c: clean(v) for c, v in peak.items()}
    by_c = {c: med([j["rps"] for j in v]) for c, v in sorted(peak.items())}
    best_c = max(by_c, key=by_c.get)
    mr = median_run(peak[best_c])
    proc = {"prefix-router": "prefix-router", "haproxy": "haproxy", "direct": "nginx-worker"}[t]
    res[t] = {
        "p50_us": med([j["p50_us"] for j in lat]), "p99_us": med([j["p99_us"] for j in lat]),
        "latency_runs_used": len(lat),
        "p50_us_rounds": [j["p50_us"] for j in lat], "p99_us_rounds": [j["p99_us"] for j in lat],
        "c1_rps": med([j["rps"] for j in lat]),
        "peak_rps": by_c[best_c], "peak_connections": best_c,
        "peak_rps_by_connections": {str(c): v for c, v in by_c.items()},
        "peak_rps_rounds": {str(c): [j["rps"] for j in v] for c, v in sorted(peak.items())},
        "peak_p99_us": med([j["p99_us"] for j in peak[best_c]]),
        "peak_process_cpu_pct": mr["process_cpu_pct"].get(proc),
        "peak_cpu_busy_pct": mr["cpu_busy_pct"], "peak_cpu_steal_pct": mr["cpu_steal_pct"],
        "peak_other_cpu_pct": mr.get("other_cpu_pct"),
        "errors": sum(sum(j["errors"].values()) for j in runs if j["target"] == t),
    }
d, pr, hp = res["direct"], res["prefix-router"], res["haproxy"]
for t in ("prefix-router", "haproxy"):
    r = res[t]
    r["added_p50_us"] = r["p50_us"] - d["p50_us"]
    r["added_p99_us"] = r["p99_us"] - d["p99_us"]
    r["peak_vs_direct"] = r["peak_rps"] / d["peak_rps"]
    r["peak_vs_haproxy"] = r["peak_rps"] / hp["peak_rps"]
    cpu = r["peak_process_cpu_pct"]
    r["peak_rps_per_proxy_cpu"] = r["peak_rps"] / (cpu / 100) if cpu else None

def x(a, b): return f"{a / b:.2f}x" if b and b > 0 else "-"
def pct(v): return "-" if v is None else f"{v:.0f}%"
lc, pc = f"cpu{load_cpu}", f"cpu{proxy_cpu}"

print(f"{prv} ({commit}, binary built {bin_mtime}), {hpv.split(' - ')[0]}, {ngv.split(': ')[-1]}, {wrkv.split(' Copyright')[0]}.")
print()
print(f"Gateway overhead on the native route: POST /invocations, {int(body):,}-byte JSON body, prefix "
      f"{int(prefix):,} bytes, 3 nginx instances; {threads} proxy thread(s); {placement}; "
      f"median of {rounds} interleaved round(s) of {duration} s "
      f"(of the rounds during which the machine was otherwise idle).")
print()
print("| path | p50 (c=1) | p99 (c=1) | added p50 | added p99 | added p50 vs HAProxy's | peak req/s (connections) | vs direct | vs HAProxy | proxy CPU at peak | load CPU busy at peak |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for t in targets:
    r = res[t]
    peak = f"{r['peak_rps']:,.0f} ({r['peak_connections']})"
    busy = pct(r["peak_cpu_busy_pct"].get(lc)) if load_cpu else "-"
    if t == "direct":
        print(f"| direct to upstream (nginx) | {r['p50_us']:.0f} us | {r['p99_us']:.0f} us | - | - | - | {peak} | "
              f"1.00x | {x(r['peak_rps'], hp['peak_rps'])} | - | {busy} |")
    else:
        print(f"| {t} | {r['p50_us']:.0f} us | {r['p99_us']:.0f} us | {r['added_p50_us']:.0f} us | "
              f"{r['added_p99_us']:.0f} us | {x(r['added_p50_us'], hp['added_p50_us'])} | {peak} | "
              f"{r['peak_vs_direct']:.2f}x | {r['peak_vs_haproxy']:.2f}x | {pct(r['peak_process_cpu_pct'])} | {busy} |")
print()
g1 = pr["added_p50_us"] < 100
g2 = pr["peak_rps"] >= hp["peak_rps"]
print(f"Goal (under 100 us added at p50): {'met' if g1 else 'NOT met'} "
      f"({pr['added_p50_us']:.0f} us; HAProxy adds {hp['added_p50_us']:.0f} us).")
print(f"Goal (peak throughput at least HAProxy's): {'met' if g2 else 'NOT met'} "
      f"({pr['peak_rps']:,.0f} vs {hp['peak_rps']:,.0f} req/s, {pr['peak_vs_haproxy']:.2f}x).")
other = [j.get("other_cpu_pct", 0) for j in runs]
busy_runs = sum(1 for j in runs if j.get("busy"))
groups = {}
for j in runs: groups.setdefault((j["target"], j["phase"], j["connections"]), []).append(j)
unclean = [f"{t} {ph} c={c}" for (t, ph, c), v in groups.items() if all(j.get("busy") for j in v)]
repeated = sum(j.get("attempt", 0) for j in runs)
print(f"CPU used by other processes on the machine during the kept load runs: median {med(other):.0f}%, "
      f"max {max(other):.0f}% of one CPU; {repeated} repeat(s) of runs during which it was busy" +
      (f" -- WARNING: {busy_runs} of {len(runs)} kept runs still shared the machine with other work "
       f"(over {busy_limit}% of a CPU). Medians leave them out where a measurement has a clean run; "
       + ("these have none, so their numbers are not reliable: " + ", ".join(unclean) + "."
          if unclean else "every measurement had one.") if busy_runs else "."))
if load_cpu:
    for t in ("prefix-router", "haproxy"):
        r = res[t]
        if ((r["peak_process_cpu_pct"] or 0) < 90 and (r["peak_cpu_busy_pct"].get(lc) or 0) > 90
                and (r["peak_other_cpu_pct"] or 0) <= float(busy_limit)):
            print(f"Note: at {t}'s peak its CPU was {pct(r['peak_process_cpu_pct'])} busy and the load "
                  f"generator's CPU {pct(r['peak_cpu_busy_pct'].get(lc))}: wrk and nginx, not {t}, set that peak.")
print()
cs = sorted({int(c) for t in targets for c in res[t]["peak_rps_by_connections"]})
print("Requests/s by connections (median of rounds; every round in summary.json):")
print()
print("| path | " + " | ".join(f"c={c}" for c in cs) + " |")
print("|---|" + "---:|" * len(cs))
for t in targets:
    print(f"| {t} | " + " | ".join(f"{res[t]['peak_rps_by_connections'].get(str(c), 0):,.0f}" for c in cs) + " |")

# Where each proxy sent the run's requests (both hash the same fixed body: one instance each,
# until the in-flight count spills: concurrency_threshold for prefix-router, the 150% balance
# factor for HAProxy).
dist = {"prefix-router": {}, "haproxy": {}}
try:
    for line in open(f"{out}/prefix-router-metrics.txt"):
        m = re.match(r'prefix_router_requests_total\{instance="([^"]*)",[^}]*decision="([^"]*)"\} (\d+)', line)
        if m: dist["prefix-router"].setdefault(m[1], {})[m[2]] = int(m[3])
    for row in csv.reader(open(f"{out}/haproxy-stats.csv")):
        if len(row) > 7 and row[0] == "instances" and row[1] not in ("FRONTEND", "BACKEND"):
            dist["haproxy"][row[1]] = int(row[7] or 0)
except OSError:
    pass
print()
print("Requests per instance over the whole run: prefix-router " +
      ", ".join(f"{k} {sum(v.values()):,} ({', '.join(f'{d} {n:,}' for d, n in sorted(v.items()))})"
                for k, v in sorted(dist["prefix-router"].items())) +
      "; HAProxy " + ", ".join(f"{k} {v:,}" for k, v in sorted(dist["haproxy"].items())) + ".")
if int(errors):
    print()
    print(f"ERRORS: {errors} load run(s) saw socket errors or non-2xx responses (see {out}/wrk-*.txt).")
summary = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "threads": int(threads),
           "duration_s": int(duration), "rounds": int(rounds), "prefix_length": int(prefix),
           "body_bytes": int(body), "placement": placement, "load_runs_elapsed_s": int(elapsed),
           "versions": {"prefix-router": prv, "commit": commit, "binary_built": bin_mtime,
                        "haproxy": hpv, "nginx": ngv, "wrk": wrkv}, "results": res,
           "requests_per_instance": dist,
           "goals": {"added_p50_under_100us": g1, "peak_at_least_haproxy": g2},
           "other_cpu_pct": {"median": med(other), "max": max(other), "busy_runs_kept": busy_runs, "measurements_without_clean_run": unclean,
                             "runs_repeated": repeated},
           "errored_runs": int(errors)}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
PY
echo >&2
echo "bench-gateway: load runs took ${elapsed} s; raw outputs, configs and summary.json in $out" >&2
[ "$errors" = 0 ] || die "$errors load run(s) had errors"
