#!/usr/bin/env bash
# Soak test of the gateway (tracker issue 6, "Memory levels off"): REQUESTS requests through
# `prefix-router serve` (prefix-aware) to 3 engine emulators (tiny-test profile, time-scaled so
# a request costs about a millisecond), with mixed traffic: half streaming, half not, a tenth
# abandoned by the client (mid-request body, while waiting for the response head, mid-stream).
# Everything on loopback, on ephemeral ports.
#
# The load is `prefix-router bench` in a closed loop, run in slices (100,000 requests each; a
# tenth of REQUESTS below 200,000) with a new seed per slice, so the gateway keeps seeing a few
# new prefixes (documents) while only a few are live at a time. After each slice, with the
# gateway idle, the script samples the gateway's VmRSS (/proc/PID/status). At the end it reads
# the engines' RSS, the gateway's open descriptors and its /metrics in-flight gauge, stops
# everything with SIGTERM, and prints a summary.
#
# Each sample records VmRSS and its two parts (/proc/PID/status): RssAnon, the process's own
# memory (heap, stacks: what a leak or unbounded growth would show in), and RssFile, pages of
# the binary and shared libraries mapped from the page cache. RssFile creeps up over a long run
# as rarely taken code paths are first touched (the kernel maps neighbouring cached pages with
# them, and the engines and bench run the same binary); it is shared, clean and reclaimable.
# RssAnon is small (about 2 MiB) and moves by a few hundred KiB between samples as the
# allocator's arenas fragment and are trimmed, so its bound is absolute rather than relative.
#
# Fails (exit 1) when the gateway dies or does not stop cleanly, when the in-flight gauge is not
# 0 once idle, when from the sample at 100,000 requests (the first sample in runs below 200,000)
# to the end the gateway's VmRSS grew by more than MAX_GROWTH_PCT or its RssAnon by more than
# MAX_ANON_GROWTH_KIB, or when more than MAX_ERRORS_PCT of requests failed. Aborted requests are
# not errors.
#
# Idle mode (SOAK_MODE=idle, tracker issue 21): no load. After a few warm-up requests the script
# samples the gateway's RSS, opens SOAK_IDLE_CONNECTIONS client connections (default 15000) that
# each send one GET /health and then stay open and idle, samples the RSS again, closes them all,
# waits 3 s and samples once more. Fails when the RSS after is more than MAX_GROWTH_PCT above the
# RSS before, or when the gateway refused or failed any of them. The gateway runs with
# --max-connections SOAK_IDLE_CONNECTIONS+1000, and the script raises its own descriptor limit.
#
# Usage: scripts/soak.sh [REQUESTS]      (default 1000000; 2000 is a few-second smoke run)
#        SOAK_MODE=idle scripts/soak.sh
# Environment (all optional):
#   PREFIX_ROUTER_BIN     the binary (default: build/release/src/prefix-router, else build/rel/...)
#   SOAK_OUT              output directory (default build/soak): summary.json, rss.tsv, logs,
#                         one bench JSON per slice
#   SOAK_CONCURRENCY      closed-loop users (default 24: the 3 engines run 8 sequences each)
#   SOAK_STREAM_FRACTION  share of streaming requests (default 0.5)
#   SOAK_ABORT_FRACTION   share of abandoned requests (default 0.1)
#   SOAK_TIME_SCALE       the engines' --time-scale (default 0.01)
#   SOAK_IO_THREADS       gateway I/O threads (default 2)
#   MAX_GROWTH_PCT        VmRSS growth bound in percent, reference sample to end (default 20)
#   MAX_ANON_GROWTH_KIB   RssAnon growth bound in KiB, reference sample to end (default 1024:
#                         about a byte a request over 900,000; a leak of one small allocation
#                         per request would be tens of MiB)
#   MAX_ERRORS_PCT        failed requests bound, percent of requests sent (default 0.1)
#   SOAK_SLICE            requests between RSS samples (default 100000; a tenth of REQUESTS
#                         below 200,000)
#   SOAK_MAX_WALL_S       start no new slice after this many seconds (default 0: no limit); the
#                         summary then says how many of REQUESTS were sent
#   SOAK_MODE             load (default) or idle (see above)
#   SOAK_IDLE_CONNECTIONS idle mode: connections held open (default 15000)
#   SOAK_IDLE_ROUNDS      idle mode: floods one after the other (default 1); the last is judged
# Run it niced on a shared machine: nice -n 10 scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
requests=${1:-1000000}
case "$requests" in ''|*[!0-9]*) echo "soak: REQUESTS must be a whole number" >&2; usage >&2; exit 2 ;; esac
[ "$requests" -ge 10 ] || { echo "soak: REQUESTS must be at least 10" >&2; exit 2; }
[ $# -le 1 ] || { echo "soak: one argument at most (REQUESTS)" >&2; exit 2; }

bin=${PREFIX_ROUTER_BIN:-}
if [ -z "$bin" ]; then
  for b in build/release/src/prefix-router build/rel/src/prefix-router; do
    [ -x "$b" ] && { bin=$b; break; }
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "soak: no prefix-router binary (set PREFIX_ROUTER_BIN or run scripts/build.sh release)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "soak: python3 not found" >&2; exit 2; }
command -v curl >/dev/null || { echo "soak: curl not found" >&2; exit 2; }

out=${SOAK_OUT:-build/soak}
users=${SOAK_CONCURRENCY:-24}
stream_fraction=${SOAK_STREAM_FRACTION:-0.5}
abort_fraction=${SOAK_ABORT_FRACTION:-0.1}
time_scale=${SOAK_TIME_SCALE:-0.01}
io_threads=${SOAK_IO_THREADS:-2}
max_growth=${MAX_GROWTH_PCT:-20}
max_anon_growth=${MAX_ANON_GROWTH_KIB:-1024}
max_errors=${MAX_ERRORS_PCT:-0.1}
if [ "$requests" -ge 200000 ]; then slice=100000; else slice=$((requests / 10)); fi
slice=${SOAK_SLICE:-$slice}
max_wall=${SOAK_MAX_WALL_S:-0}
mode=${SOAK_MODE:-load}
idle_connections=${SOAK_IDLE_CONNECTIONS:-15000}
case "$mode" in load|idle) ;; *) echo "soak: SOAK_MODE is load or idle" >&2; exit 2 ;; esac
case "$idle_connections" in ''|*[!0-9]*) echo "soak: SOAK_IDLE_CONNECTIONS takes a whole number" >&2; exit 2 ;; esac
case "$slice$max_wall$max_anon_growth" in *[!0-9]*) echo "soak: SOAK_SLICE, SOAK_MAX_WALL_S and MAX_ANON_GROWTH_KIB take whole numbers" >&2; exit 2 ;; esac
[ "$slice" -ge 1 ] || { echo "soak: SOAK_SLICE must be at least 1" >&2; exit 2; }
# A small long-context workload that fits the tiny-test engine (4,096-token context): a few
# documents per slice, short answers. The gateway keys on the first 1,024 characters (the
# shortest prefix length allowed), which fall inside the shared instruction and document as in
# production use; with the default 2,048 a key would reach into each request's own question,
# so every spilled request would add a key to the bounded table of moved keys (core/key_homes.h,
# 65,536 keys at most) and the soak would measure that table filling up.
workload=(--workload long-context --param documents=6 --param prefix_tokens=400 --param preamble_tokens=40
          --param output_tokens_median=8 --param output_tokens_max=16)

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/slice-*.json "$out"/*.log "$out"/rss.tsv "$out"/summary.json "$out"/metrics-end.txt
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
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
die() { echo "soak: $*" >&2; exit 1; }

port_from() {  # port_from LOG PATTERN PID: the port a server logged, waiting up to 10 s
  local p=
  for _ in $(seq 200); do
    p=$(grep -o "$2 127.0.0.1:[0-9]*" "$1" 2>/dev/null | head -1 | grep -o '[0-9]*$' || true)
    [ -n "$p" ] && { echo "$p"; return 0; }
    kill -0 "$3" 2>/dev/null || break
    sleep 0.05
  done
  tail -n 20 "$1" >&2 || true
  return 1
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# "VmRSS<TAB>RssAnon<TAB>RssFile" of a process, in KiB
rss_parts() {
  awk '/^VmRSS:/ {r = $2} /^RssAnon:/ {a = $2} /^RssFile:/ {f = $2}
       END {printf "%d\t%d\t%d", r, a, f}' "/proc/$1/status" 2>/dev/null || printf '0\t0\t0'
}

# ---- servers
engine_pids=(); engine_ports=(); instances=()
for i in 1 2 3; do
  "$bin" engine --listen 127.0.0.1:0 --profile tiny-test --time-scale "$time_scale" --model llama \
    >"$out/engine-$i.log" 2>&1 &
  pids+=($!); engine_pids+=($!)
  p=$(port_from "$out/engine-$i.log" "engine emulator on" "$!") || die "engine $i did not start (see $out/engine-$i.log)"
  engine_ports+=("$p")
  instances+=(--instance "e$i=http://127.0.0.1:$p")
done
limit_flags=()
[ "$mode" = idle ] && limit_flags=(--max-connections $((idle_connections + 1000)))
"$bin" serve --listen 127.0.0.1:0 --strategy prefix-aware --prefix-length 1024 --io-threads "$io_threads" "${instances[@]}" \
  "${limit_flags[@]}" >"$out/gateway.log" 2>&1 &
gw_pid=$!; pids+=($gw_pid)
gw_port=$(port_from "$out/gateway.log" "listening on" "$gw_pid") || die "the gateway did not start (see $out/gateway.log)"
gw=http://127.0.0.1:$gw_port
for _ in $(seq 100); do curl -sf -o /dev/null --max-time 1 "$gw/health" && break; sleep 0.1; done
curl -sf -o /dev/null --max-time 2 "$gw/health" || die "the gateway does not answer /health"

if [ "$mode" = idle ]; then
  # Warm-up: a few requests of every kind the gateway serves, so that "before" is a running gateway.
  "$bin" bench --url "$gw" "${workload[@]}" --seed 1 --concurrency 4 --requests 200 --time-scale "$time_scale" \
    --model llama --timeout 30 --quiet >"$out/bench-warmup.log" 2>&1 || { cat "$out/bench-warmup.log" >&2; die "warm-up failed"; }
  sleep 1
  before=$(rss_parts "$gw_pid")
  echo "soak: idle mode, $idle_connections connections to the gateway (pid $gw_pid, $gw); RSS before (VmRSS, RssAnon, RssFile KiB): ${before//$'\t'/, }" >&2
  python3 - "$gw_port" "$idle_connections" "$gw_pid" "$before" "$max_growth" "$out" "${SOAK_IDLE_ROUNDS:-1}" <<'PY'
import json, resource, socket, sys, time
port, n, pid, before, max_growth, out, rounds = sys.argv[1:]
n, rounds = int(n), int(rounds)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1024), hard))
def rss():
    f = {l.split(":")[0]: int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith(("VmRSS", "RssAnon", "RssFile"))}
    return f["VmRSS"], f["RssAnon"], f["RssFile"]
request = b"GET /health HTTP/1.1\r\nHost: soak\r\n\r\n"
def flood():
    socks, failed = [], 0
    t0 = time.time()
    for i in range(n):
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", int(port)))
            s.sendall(request)
            socks.append(s)
        except OSError:
            failed += 1
            s.close()
    answered = 0
    for s in socks:  # each reads its answer, then stays open and idle
        s.settimeout(10)
        try:
            head = s.recv(4096)
            answered += head.startswith(b"HTTP/1.1 200")
        except OSError:
            pass
    opened = time.time() - t0
    time.sleep(1)
    held = rss()
    for s in socks:
        s.close()
    time.sleep(3)
    return failed, answered, opened, held, rss()
afters = []
for r in range(rounds):  # later rounds: what a flood of the same size adds once the first is over
    failed, answered, opened, held, after = flood()
    afters.append(after)
    if rounds > 1:
        print(f"soak: round {r + 1}: VmRSS held {held[0] / 1024:.1f} MiB, after {after[0] / 1024:.1f} MiB")
    if failed or answered != n: break
b = [int(x) for x in before.split()]
growth = 100.0 * (after[0] - b[0]) / b[0]
fail = []
if failed or answered != n: fail.append(f"{n - answered} of {n} connections not served (connect failures {failed})")
if growth > float(max_growth): fail.append(f"VmRSS after closing is {growth:+.1f}% of before (bound {max_growth}%)")
mib = lambda k: k / 1024
print(f"soak: idle mode, {n:,} connections each sending GET /health then held idle (opened in {opened:.1f} s)")
print(f"  VmRSS before   {mib(b[0]):.1f} MiB (RssAnon {mib(b[1]):.1f})")
print(f"  VmRSS held     {mib(held[0]):.1f} MiB (RssAnon {mib(held[1]):.1f}) with {answered:,} answered connections open")
print(f"  VmRSS after    {mib(after[0]):.1f} MiB (RssAnon {mib(after[1]):.1f}) 3 s after closing: {growth:+.1f}% of before (bound {max_growth}%)")
print("  result         " + ("PASS" if not fail else "FAIL: " + "; ".join(fail)))
json.dump({"mode": "idle", "connections": n, "answered": answered, "connect_failures": failed,
           "before_kib": b, "held_kib": list(held), "after_kib": list(after), "after_by_round_kib": [list(a) for a in afters], "growth_pct": round(growth, 2),
           "max_growth_pct": float(max_growth), "pass": not fail, "failures": fail},
          open(f"{out}/summary.json", "w"), indent=2)
sys.exit(1 if fail else 0)
PY
  exit $?
fi

echo "soak: $requests requests through the gateway (pid $gw_pid, $gw) to 3 engines (ports ${engine_ports[*]}), $users users, stream fraction $stream_fraction, abort fraction $abort_fraction, slices of $slice" >&2
printf 'requests\tgateway_rss_kib\tgateway_anon_kib\tgateway_file_kib\twall_s\n' > "$out/rss.tsv"
printf '0\t%s\t0\n' "$(rss_parts "$gw_pid")" >> "$out/rss.tsv"

# ---- load, slice by slice
start=$(date +%s.%N)
sent=0; n=0
stopped_early=0
while [ "$sent" -lt "$requests" ]; do
  if [ "$max_wall" -gt 0 ] && [ "$n" -gt 0 ] && \
     python3 -c "import sys; sys.exit(0 if $(date +%s.%N) - $start > $max_wall else 1)"; then
    stopped_early=1
    echo "soak: wall-time limit of $max_wall s reached after $sent requests: no further slice" >&2
    break
  fi
  n=$((n + 1))
  this=$slice
  [ $((requests - sent)) -lt "$this" ] && this=$((requests - sent))
  # Below the last full slice a remainder is folded into it (the last sample is at REQUESTS).
  [ $((requests - sent - this)) -gt 0 ] && [ $((requests - sent - this)) -lt "$slice" ] && this=$((requests - sent))
  rc=0
  "$bin" bench --url "$gw" "${workload[@]}" --seed "$n" --concurrency "$users" --requests "$this" \
    --time-scale "$time_scale" --stream-fraction "$stream_fraction" --abort-fraction "$abort_fraction" \
    --model llama --timeout 30 --strategy prefix-aware --instances 3 --quiet \
    --json "$out/slice-$(printf %03d "$n").json" >"$out/bench-$n.log" 2>&1 || rc=$?
  kill -0 "$gw_pid" 2>/dev/null || { tail -n 30 "$out/gateway.log" >&2; die "the gateway died during slice $n"; }
  [ "$rc" = 0 ] || { cat "$out/bench-$n.log" >&2; die "bench failed in slice $n (exit $rc)"; }
  sent=$((sent + this))
  now=$(date +%s.%N)
  parts=$(rss_parts "$gw_pid")
  printf '%s\t%s\t%s\n' "$sent" "$parts" "$(python3 -c "print(round($now - $start, 1))")" >> "$out/rss.tsv"
  echo "soak: $sent requests, gateway RSS (VmRSS, RssAnon, RssFile KiB): ${parts//$'\t'/, }" >&2
done
end=$(date +%s.%N)

# ---- idle state: the in-flight gauge must come back to 0 (aborted clients release theirs)
in_flight=
for _ in $(seq 50); do
  curl -sf --max-time 5 "$gw/metrics" > "$out/metrics-end.txt" || die "GET /metrics failed"
  in_flight=$(awk '/^prefix_router_in_flight_requests[{ ]/ {s += $NF} END {print s + 0}' "$out/metrics-end.txt")
  [ "$in_flight" = 0 ] && break
  sleep 0.1
done
gw_fds=$(ls "/proc/$gw_pid/fd" 2>/dev/null | wc -l)
engine_rss=()
for pid in "${engine_pids[@]}"; do engine_rss+=("$(rss_kib "$pid")"); done
gw_hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$gw_pid/status" 2>/dev/null || echo 0)

# ---- stop: the gateway must exit 0 on SIGTERM
kill -TERM "$gw_pid"
gw_rc=0
for _ in $(seq 100); do kill -0 "$gw_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$gw_pid" 2>/dev/null; then gw_rc=timeout; else wait "$gw_pid" || gw_rc=$?; fi

python3 - "$out" "$requests" "$start" "$end" "$in_flight" "$gw_fds" "$gw_hwm" "$gw_rc" "$max_growth" \
  "$max_errors" "$users" "$stream_fraction" "$abort_fraction" "$time_scale" "${engine_rss[*]}" "$sent" \
  "$max_anon_growth" <<'PY'
import glob, json, re, sys
(out, requests, start, end, in_flight, fds, hwm, gw_rc, max_growth, max_errors, users, sf, af, ts,
 engine_rss, planned_sent, max_anon_growth) = sys.argv[1:]
runs = [json.load(open(f))[0] for f in sorted(glob.glob(f"{out}/slice-*.json"))]
counted = sum(r["requests"] for r in runs)
errors = sum(r["errors"] for r in runs)
aborted = sum(r["extra"].get("aborted", 0) for r in runs)
by_point = {k: sum(r["extra"].get(f"aborted_{k}", 0) for r in runs) for k in ("sending", "waiting", "receiving")}
sent = counted + aborted
wall = float(end) - float(start)
rows = [l.split("\t") for l in open(f"{out}/rss.tsv").read().split("\n")[1:] if l]
# (requests, VmRSS, RssAnon, RssFile, wall seconds)
samples = [(int(a), int(b), int(c), int(d), float(e)) for a, b, c, d, e in rows]
# The reference: the sample at 100,000 requests when the run went past 200,000, else the first.
first = next((x for x in samples[1:] if x[0] >= 100000), samples[1]) if samples[-1][0] >= 200000 else samples[1]
last = samples[-1]
pct = lambda a, b: 100.0 * (b - a) / a if a else float("inf")
growth_rss = pct(first[1], last[1])       # VmRSS, percent
anon_growth = last[2] - first[2]          # RssAnon, KiB
growth = pct(first[2], last[2])
metrics = open(f"{out}/metrics-end.txt").read()
disc = dict(re.findall(r'prefix_router_client_disconnects_total\{stage="([^"]+)"\} (\d+)', metrics))
up_err = sum(int(v) for v in re.findall(r'^prefix_router_upstream_errors_total\{[^}]*\} (\d+)', metrics, re.M))
mib = lambda k: k / 1024
fail = []
if gw_rc != "0": fail.append(f"the gateway did not stop cleanly on SIGTERM (exit {gw_rc})")
if in_flight != "0": fail.append(f"in-flight gauge {in_flight} once idle (must be 0)")
if growth_rss > float(max_growth): fail.append(f"VmRSS grew {growth_rss:.1f}% from {first[0]:,} requests to the end (bound {max_growth}%)")
if anon_growth > int(max_anon_growth): fail.append(f"RssAnon grew {anon_growth} KiB from {first[0]:,} requests to the end (bound {max_anon_growth} KiB)")
if sent != int(planned_sent): fail.append(f"{sent:,} requests accounted for, {int(planned_sent):,} sent")
if errors > float(max_errors) / 100 * sent: fail.append(f"{errors:,} failed requests (bound {max_errors}% of those sent)")
if int(planned_sent) < int(requests):
    print(f"soak: STOPPED EARLY at the wall-time limit: {int(planned_sent):,} of {int(requests):,} requests sent")
print(f"soak: {int(planned_sent):,} requests through prefix-router serve (prefix-aware, 3 tiny-test engines at "
      f"time scale {ts}), closed loop of {users} users, {float(sf):.0%} streaming, {float(af):.0%} aborted")
print(f"  sent            {sent:,}")
print(f"  completed       {counted - errors:,} (successful)")
print(f"  aborted         {aborted:,} (sending {by_point['sending']:,}, waiting {by_point['waiting']:,}, receiving {by_point['receiving']:,})")
print(f"  errors          {errors:,}")
print(f"  wall time       {wall:.1f} s ({sent / wall:.0f} requests/s)")
print(f"  gateway VmRSS   start {mib(samples[0][1]):.1f} MiB, at {first[0]:,} requests {mib(first[1]):.1f} MiB, "
      f"at the end ({last[0]:,}) {mib(last[1]):.1f} MiB: growth {growth_rss:+.1f}% (bound {max_growth}%); "
      f"peak {mib(int(hwm)):.1f} MiB")
print(f"  gateway RssAnon start {mib(samples[0][2]):.2f} MiB, at {first[0]:,} requests {mib(first[2]):.2f} MiB, "
      f"at the end ({last[0]:,}) {mib(last[2]):.2f} MiB: growth {anon_growth:+d} KiB, {growth:+.1f}% "
      f"(bound {max_anon_growth} KiB); RssFile {mib(first[3]):.1f} -> {mib(last[3]):.1f} MiB")
print("  samples         " + ", ".join(f"{s[0]:,}: {mib(s[1]):.1f}/{mib(s[2]):.2f}" for s in samples[1:])
      + " (requests: VmRSS/RssAnon MiB)")
print("  engines RSS     " + ", ".join(f"e{i + 1} {mib(int(k)):.1f} MiB" for i, k in enumerate(engine_rss.split())))
print(f"  idle in-flight  {in_flight}; gateway open descriptors {fds}; client disconnects seen by the gateway: "
      f"waiting {disc.get('waiting', 0)}, streaming {disc.get('streaming', 0)}; upstream errors {up_err}")
print(f"  gateway stop    {'exit 0 on SIGTERM' if gw_rc == '0' else gw_rc}")
print("  result          " + ("PASS" if not fail else "FAIL: " + "; ".join(fail)))
json.dump({"requests": int(requests), "stopped_early": int(planned_sent) < int(requests), "sent": sent, "completed": counted - errors, "aborted": aborted,
           "aborted_by_point": by_point, "errors": errors, "wall_s": round(wall, 1),
           "rss_kib": [{"requests": s[0], "rss_kib": s[1], "anon_kib": s[2], "file_kib": s[3], "wall_s": s[4]}
                       for s in samples],
           "rss_growth_pct": round(growth_rss, 2), "max_growth_pct": float(max_growth),
           "anon_growth_kib": anon_growth, "anon_growth_pct": round(growth, 2),
           "max_anon_growth_kib": int(max_anon_growth), "gateway_hwm_kib": int(hwm),
           "engine_rss_kib": [int(k) for k in engine_rss.split()], "idle_in_flight": int(in_flight),
           "gateway_fds": int(fds), "client_disconnects": {k: int(v) for k, v in disc.items()},
           "upstream_errors": up_err, "gateway_exit": gw_rc, "users": int(users),
           "stream_fraction": float(sf), "abort_fraction": float(af), "time_scale": float(ts),
           "pass": not fail, "failures": fail}, open(f"{out}/summary.json", "w"), indent=2)
sys.exit(1 if fail else 0)
PY
