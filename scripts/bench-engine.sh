#!/usr/bin/env bash
# Measures the engine emulator's own overhead: how many requests per second one core of
# `prefix-router engine` serves when modelled time is negligible, against the goal of 2,000 req/s.
#
#   engine    taskset -c 1 prefix-router engine --profile llama-70b-h100x8 --time-scale 0.00001
#             (a 16-token reply models ~200 ms, i.e. ~2 us of wall time: what is measured is the
#             emulator's CPU cost: HTTP, JSON, tokenizer, scheduler, KV cache, response writing)
#   chat      taskset -c 0 wrk -t1 -c32 -d10s -s bench/engine/chat.lua  URL/v1/chat/completions
#             a fixed shape: non-streaming chat, a ~100-token prompt, max_tokens 16
#             (bench/engine/chat-100.json; the same prompt every time, so its full blocks hit
#             the prefix cache after the first request, as a fixed-prompt benchmark does on vLLM)
#   baseline  the same wrk against GET /health of the same engine: the same HTTP server with no
#             model work, so chat/baseline is the cost of the model path
# One warm-up run, then --rounds interleaved rounds (baseline, chat, ...); medians reported.
# The engine is alone on one CPU and wrk on the other (no pinning on a 1-CPU machine). Loopback
# only; every load run is bounded by wrk -d; background processes are cleaned up on exit.
#
# Prints a markdown summary; writes raw wrk outputs, the engine log, its /metrics after the run
# and summary.json to the output directory (default build/release/bench-results/engine, or
# $OUT_DIR, or --out DIR).
#
# Usage: scripts/bench-engine.sh [--quick] [--duration S] [--rounds R] [--connections C] [--out DIR]
#        --quick: a 3 s smoke run (one round, 1 s warm-up)
#        (after scripts/setup.sh and scripts/build.sh release; the binary is $PREFIX_ROUTER_BIN or
#        build/release/src/prefix-router)
# Exits non-zero if a check fails or any load run saw socket errors or non-2xx responses; not
# when the goal is missed (that is reported).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

duration=10
rounds=3
connections=32
quick=0
goal_rps=2000
out=${OUT_DIR:-build/release/bench-results/engine}
bin=${PREFIX_ROUTER_BIN:-build/release/src/prefix-router}
profile=llama-70b-h100x8
time_scale=0.00001

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --duration) duration=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --connections) connections=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-engine: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
if [ $quick = 1 ]; then
  duration=3; rounds=1
fi
case "$duration$rounds$connections" in *[!0-9]*) echo "bench-engine: --duration, --rounds and --connections take whole numbers" >&2; exit 2 ;; esac
[ "$duration" -ge 1 ] && [ "$rounds" -ge 1 ] && [ "$connections" -ge 1 ] || { echo "bench-engine: --duration, --rounds and --connections must be >= 1" >&2; exit 2; }
warm=$(( quick ? 1 : 2 ))

die() { echo "bench-engine: $*" >&2; exit 1; }

if ! command -v wrk >/dev/null 2>&1; then
  # scripts/setup.sh installs wrk; install it here too when we can.
  if [ "$(id -u)" = 0 ]; then
    echo "bench-engine: wrk not found: apt-get install wrk" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null || die "could not install wrk"
  else
    die "wrk not found: run scripts/setup.sh (or apt-get install wrk)"
  fi
fi
for tool in wrk curl python3 taskset; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found: run scripts/setup.sh"
done
[ -x "$bin" ] || die "$bin not found: run scripts/build.sh release"

# CPU placement: the engine alone on one CPU, the load generator on another.
ncpu=$(nproc)
if [ "$ncpu" -ge 2 ]; then
  load_cpu=${LOAD_CPU:-0}; engine_cpu=${ENGINE_CPU:-1}
  pin_load=(taskset -c "$load_cpu"); pin_engine=(taskset -c "$engine_cpu")
  placement="engine on CPU $engine_cpu; wrk on CPU $load_cpu"
else
  load_cpu=; engine_cpu=
  pin_load=(); pin_engine=()
  placement="1 CPU: no pinning"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/wrk-*.txt "$out"/*.log "$out"/summary.json "$out"/results.jsonl "$out"/metrics.txt
run=$(mktemp -d /tmp/bench-engine.XXXXXX)
engine_pid=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$engine_pid" ]; then
    kill -TERM "$engine_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$engine_pid" 2>/dev/null || true
    wait "$engine_pid" 2>/dev/null || true
  fi
  rm -rf "$run"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- start the engine on an ephemeral port, read from its start-up line
engine_cmd=("$bin" engine --listen 127.0.0.1:0 --profile "$profile" --time-scale "$time_scale")
echo "${pin_engine[*]} ${engine_cmd[*]}" > "$out/engine.cmd"
"${pin_engine[@]}" "${engine_cmd[@]}" >"$out/engine.log" 2>&1 &
engine_pid=$!
port=
for _ in $(seq 100); do
  kill -0 "$engine_pid" 2>/dev/null || { cat "$out/engine.log" >&2; die "the engine exited at start-up"; }
  port=$(sed -n 's/.*engine emulator on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out/engine.log" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$out/engine.log" >&2; die "the engine did not log its address within 10 s"; }
base="http://127.0.0.1:$port"
chat_url="$base/v1/chat/completions"
health_url="$base/health"

alive() {
  kill -0 "$engine_pid" 2>/dev/null && return 0
  echo "bench-engine: the engine (pid $engine_pid) is not running; last lines of its log:" >&2
  tail -n 30 "$out/engine.log" >&2 || true
  exit 1
}

# ---- correctness: the chat shape answers 200 with 16 tokens; /health answers 200
body_file=$root/bench/engine/chat-100.json
export BODY_FILE=$body_file
code=$(curl -s -o "$run/check.json" -D "$run/check.headers" -w '%{http_code}' --max-time 5 \
  -H 'Content-Type: application/json' --data-binary "@$body_file" "$chat_url") || code=curl-failed
[ "$code" = 200 ] || { cat "$run/check.json" >&2 2>/dev/null; alive; die "check failed: chat answered $code"; }
prompt_tokens=$(python3 - "$run/check.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
u = r["usage"]
assert r["object"] == "chat.completion", r
assert u["completion_tokens"] == 16, u
assert isinstance(r["choices"][0]["message"]["content"], str) and r["choices"][0]["message"]["content"]
print(u["prompt_tokens"])
PY
) || die "check failed: unexpected chat response: $(cat "$run/check.json")"
grep -qi '^x-engine-timing: queue=' "$run/check.headers" || die "check failed: no x-engine-timing header"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$health_url") || code=curl-failed
[ "$code" = 200 ] || die "check failed: /health answered $code"
echo "bench-engine: checks passed (chat: 200, $prompt_tokens prompt tokens, 16 completion tokens; /health: 200)" >&2

# ---- load runs
errors=0
: > "$out/results.jsonl"
snap() {  # snap NAME: CPU counters of the machine and of the engine process
  cat /proc/stat > "$run/stat.$1"
  cat "/proc/$engine_pid/stat" > "$run/pstat.$1" 2>/dev/null || echo > "$run/pstat.$1"
}
wrk_run() {  # wrk_run TARGET(chat|health) DURATION ROUND
  local t=$1 d=$2 r=$3 url lua
  if [ "$t" = chat ]; then url=$chat_url; lua=$root/bench/engine/chat.lua; else url=$health_url; lua=$root/bench/engine/health.lua; fi
  local f="$out/wrk-$t-r$r.txt"
  snap before
  "${pin_load[@]}" wrk -t1 -c"$connections" -d"${d}s" --latency -s "$lua" "$url" >"$f" 2>&1 \
    || { cat "$f" >&2; alive; die "wrk failed against $url"; }
  snap after
  alive
  grep -q '^WRK_RESULT ' "$f" || { cat "$f" >&2; die "no WRK_RESULT in $f"; }
  local rc=0
  python3 - "$f" "$run" "$t" "$r" >> "$out/results.jsonl" <<'PY' || rc=$?
import json, os, sys
f, run, t, r = sys.argv[1:]
text = open(f).read()
res = json.loads(next(l for l in text.splitlines() if l.startswith("WRK_RESULT "))[len("WRK_RESULT "):])
res["non_2xx"] = 0
for line in text.splitlines():
    if line.strip().startswith("Non-2xx or 3xx responses:"):
        res["non_2xx"] = int(line.split(":")[1])
def cpus(name):
    d = {}
    for line in open(f"{run}/stat.{name}"):
        if line.startswith("cpu") and line[3].isdigit():
            k, *v = line.split(); d[k] = list(map(int, v[:8]))
    return d
b, a = cpus("before"), cpus("after")
res["cpu_busy_pct"] = {}
for k in sorted(a):
    dv = [x - y for x, y in zip(a[k], b[k])]
    tot = sum(dv) or 1   # user nice system idle iowait irq softirq steal
    res["cpu_busy_pct"][k] = round(100 * (dv[0] + dv[1] + dv[2] + dv[5] + dv[6] + dv[7]) / tot, 1)
hz = os.sysconf("SC_CLK_TCK"); secs = res["duration_us"] / 1e6
try:
    x = open(f"{run}/pstat.before").read(); y = open(f"{run}/pstat.after").read()
    tx = sum(map(int, x.rsplit(")", 1)[1].split()[11:13]))
    ty = sum(map(int, y.rsplit(")", 1)[1].split()[11:13]))
    res["engine_cpu_pct"] = round(100 * (ty - tx) / hz / secs, 1)
except (ValueError, IndexError):
    res["engine_cpu_pct"] = None
print(json.dumps({"target": t, "round": r, **res}))
if any(res["errors"].values()) or res["non_2xx"]:
    sys.exit(3)
PY
  if [ "$rc" = 3 ]; then
    echo "bench-engine: ERRORS in the $t run (round $r):" >&2
    grep -E 'Socket errors|Non-2xx' "$f" >&2 || true
    errors=$((errors + 1))
  elif [ "$rc" != 0 ]; then
    die "could not summarise $f"
  fi
}

start=$(date +%s)
echo "bench-engine: $connections connections, ${duration}s x $rounds round(s) per target ($placement)" >&2
echo "bench-engine: warm-up" >&2
wrk_run chat "$warm" warmup
for r in $(seq "$rounds"); do
  echo "bench-engine: round $r/$rounds: /health, then chat" >&2
  wrk_run health "$duration" "$r"
  wrk_run chat "$duration" "$r"
done
elapsed=$(( $(date +%s) - start ))
curl -s --max-time 5 "$base/metrics" > "$out/metrics.txt" || true

# ---- summary
python3 - "$out" "$duration" "$rounds" "$connections" "$placement" "$elapsed" "$errors" "$goal_rps" \
  "$prompt_tokens" "$(wrk -v 2>&1 | head -1)" "${load_cpu:-}" "${engine_cpu:-}" "$(cat "$out/engine.cmd")" \
  "$connections" "$duration" <<'PY'
import datetime, json, re, statistics, sys
(out, duration, rounds, conns, placement, elapsed, errors, goal, prompt, wrkv, load_cpu, engine_cpu,
 engine_cmd, c, d) = sys.argv[1:]
runs = [json.loads(l) for l in open(f"{out}/results.jsonl")]
med = statistics.median
res = {}
for t in ("health", "chat"):
    rs = [j for j in runs if j["target"] == t and j["round"] != "warmup"]
    res[t] = {
        "rps": med([j["rps"] for j in rs]), "rps_rounds": [j["rps"] for j in rs],
        "p50_us": med([j["p50_us"] for j in rs]), "p99_us": med([j["p99_us"] for j in rs]),
        "requests": sum(j["requests"] for j in rs),
        "engine_cpu_pct": med([j["engine_cpu_pct"] or 0 for j in rs]),
        "cpu_busy_pct": rs[len(rs) // 2]["cpu_busy_pct"],
        "errors": sum(sum(j["errors"].values()) + j["non_2xx"] for j in runs if j["target"] == t),
    }
h, ch = res["health"], res["chat"]
ratio = ch["rps"] / h["rps"] if h["rps"] else 0
met = ch["rps"] >= float(goal)
# Mean CPU time per request on the engine's core, from its CPU use over the runs.
for r in res.values():
    r["engine_us_per_request"] = (r["engine_cpu_pct"] / 100) * 1e6 / r["rps"] if r["rps"] else None
metrics = {}
try:
    for line in open(f"{out}/metrics.txt"):
        m = re.match(r'(vllm:[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$', line.strip())
        if m and not m[1].endswith("_bucket"): metrics[m[1] + (m[2] or "")] = float(m[3])
except OSError:
    pass
def busy(r, cpu): return f"{r['cpu_busy_pct'].get('cpu' + cpu, 0):.0f}%" if cpu else "-"
print(f"Engine emulator overhead: {engine_cmd}")
print(f"wrk -t1 -c{c} -d{d}s; {placement}; median of {rounds} interleaved round(s).")
print(f"Chat shape: non-streaming, {prompt} prompt tokens (rendered), max_tokens 16 (bench/engine/chat-100.json).")
print()
print("| target | req/s (median) | rounds | p50 | p99 | engine CPU | engine CPU per request | load CPU busy |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for name, t in (("GET /health (baseline)", "health"), ("POST /v1/chat/completions", "chat")):
    r = res[t]
    rounds_s = ", ".join(f"{x:,.0f}" for x in r["rps_rounds"])
    per = f"{r['engine_us_per_request']:.0f} us" if r["engine_us_per_request"] else "-"
    print(f"| {name} | {r['rps']:,.0f} | {rounds_s} | {r['p50_us'] / 1000:.2f} ms | {r['p99_us'] / 1000:.2f} ms | "
          f"{r['engine_cpu_pct']:.0f}% | {per} | {busy(r, load_cpu)} |")
print()
print(f"Goal (>= {int(goal):,} chat req/s on one core): {'met' if met else 'NOT met'} ({ch['rps']:,.0f} req/s).")
print(f"Model path cost: chat serves {ratio:.2f}x the /health rate "
      f"({ch['engine_us_per_request'] or 0:.0f} vs {h['engine_us_per_request'] or 0:.0f} us of engine CPU per request).")
if ch["engine_us_per_request"]:
    print(f"One engine core's chat capacity at that cost: ~{1e6 / ch['engine_us_per_request']:,.0f} req/s.")
if ch["engine_cpu_pct"] < 90:
    print(f"Note: the engine's CPU was only {ch['engine_cpu_pct']:.0f}% busy during chat runs: the load "
          f"generator or other processes on this machine limited the rate.")
def metric(name, labels='{model_name="llama"}'): return metrics.get(name + labels)
succ = metric("vllm:request_success_total", '{model_name="llama",finished_reason="length"}')
if succ is not None:
    print(f"Engine counters after the run: {succ:,.0f} requests finished, "
          f"{metric('vllm:generation_tokens_total') or 0:,.0f} tokens generated, prefix cache hits "
          f"{metric('vllm:prefix_cache_hits_total') or 0:,.0f} of {metric('vllm:prefix_cache_queries_total') or 0:,.0f} "
          f"prompt tokens.")
if int(errors):
    print()
    print(f"ERRORS: {errors} load run(s) saw socket errors or non-2xx responses (see {out}/wrk-*.txt).")
summary = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "engine_cmd": engine_cmd,
           "connections": int(conns), "duration_s": int(duration), "rounds": int(rounds),
           "placement": placement, "prompt_tokens": int(prompt), "max_tokens": 16,
           "load_runs_elapsed_s": int(elapsed), "wrk": wrkv, "results": res,
           "chat_vs_health": ratio, "goal_rps": int(goal), "goal_met": met,
           "engine_metrics": metrics, "errored_runs": int(errors)}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
PY
echo >&2
echo "bench-engine: load runs took ${elapsed} s; raw outputs and summary.json in $out" >&2
[ "$errors" = 0 ] || die "$errors load run(s) had errors"
