#!/usr/bin/env bash
# What kv-aware's `tokenizer: engine` costs against `tokenizer: local`, on loopback, in one run:
# 3 engine emulators (real time, KV events on) behind `prefix-router serve --strategy kv-aware`,
# the same bench workload sent through the gateway with each tokenizer source, alternating
# (local, engine, local, engine, ... for --rounds rounds); every run starts on fresh engines.
# Reports per run the client's TTFT P50/P90 and hit rate (bench), the gateway's mean time from a
# complete request to its routing decision (prefix_router_routing_decision_seconds: parse, hash,
# /tokenize with engine, pick) and the mean /tokenize round trip (prefix_router_tokenize_seconds),
# then the medians per source and engine / local ratios. Raw bench JSON and metrics go to --out.
#
# Usage: scripts/tokenize-cost.sh [--rounds R] [--requests N] [--concurrency C] [--workload W]
#                                 [--out DIR]      (after scripts/setup.sh and scripts/build.sh release)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3
requests=120
concurrency=4
workload=long-context
out=build/release/bench-results/tokenize-cost
bin=${PREFIX_ROUTER_BIN:-build/release/src/prefix-router}
engine_ports=(19301 19302 19303)
event_ports=(19311 19312 19313)
gw_port=19380

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift ;;
    --requests) requests=$2; shift ;;
    --concurrency) concurrency=$2; shift ;;
    --workload) workload=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "tokenize-cost: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
case "$rounds$requests$concurrency" in *[!0-9]*) echo "tokenize-cost: --rounds, --requests and --concurrency take whole numbers" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "tokenize-cost: $bin not found: run scripts/build.sh release" >&2; exit 1; }
for tool in curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "tokenize-cost: $tool not found: run scripts/setup.sh" >&2; exit 1; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/*.json "$out"/*.prom "$out"/*.log
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
trap 'rc=$?; trap - EXIT; stop_all; exit $rc' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wait_ready() {  # URL
  for _ in $(seq 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "tokenize-cost: $1 did not answer" >&2; exit 1
}

run_one() {  # SOURCE ROUND
  local source=$1 round=$2 args=()
  for k in 0 1 2; do
    # --enable-prompt-tokens-details: the hit rate column comes from the responses' cached tokens.
    "$bin" engine --listen 127.0.0.1:${engine_ports[$k]} --kv-events-endpoint "tcp://127.0.0.1:${event_ports[$k]}" \
      --enable-prompt-tokens-details >"$out/engine-$source-$round-$k.log" 2>&1 &
    pids+=($!)
    args+=(--instance "e$k=http://127.0.0.1:${engine_ports[$k]}")
  done
  for k in 0 1 2; do wait_ready "http://127.0.0.1:${engine_ports[$k]}/health"; done
  local config="$out/router-$source.yaml"
  {
    echo "listen: 127.0.0.1:$gw_port"
    echo "routing: {routing_strategy: kv-aware, tokenizer: $source}"
    echo "instances:"
    for k in 0 1 2; do
      echo "  - {name: e$k, url: 'http://127.0.0.1:${engine_ports[$k]}', kv_events: {endpoint: 'tcp://127.0.0.1:${event_ports[$k]}'}}"
    done
  } >"$config"
  "$bin" serve --config "$config" >"$out/serve-$source-$round.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$gw_port/health"
  sleep 1  # the KV event subscriptions join
  "$bin" bench --url "http://127.0.0.1:$gw_port" --workload "$workload" --requests "$requests" \
    --concurrency "$concurrency" --model llama --strategy "kv-aware+$source" --quiet \
    --json "$out/bench-$source-$round.json" >"$out/bench-$source-$round.log" 2>&1
  curl -fsS "http://127.0.0.1:$gw_port/metrics" >"$out/metrics-$source-$round.prom"
  stop_all
}

for round in $(seq "$rounds"); do
  for source in local engine; do
    echo "tokenize-cost: round $round, tokenizer: $source" >&2
    run_one "$source" "$round"
  done
done

python3 - "$out" "$rounds" <<'PY'
import json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def metric(text, name):
    m = re.search(r'^' + re.escape(name) + r'(?:\{\})? ([0-9.eE+-]+)$', text, re.M)
    return float(m.group(1)) if m else 0.0

rows = {"local": [], "engine": []}
for r in range(1, rounds + 1):
    for source in rows:
        run = json.load(open(f"{out}/bench-{source}-{r}.json"))[0]
        text = open(f"{out}/metrics-{source}-{r}.prom").read()
        dn = metric(text, "prefix_router_routing_decision_seconds_count")
        ds = metric(text, "prefix_router_routing_decision_seconds_sum")
        tn = metric(text, "prefix_router_tokenize_seconds_count")
        ts = metric(text, "prefix_router_tokenize_seconds_sum")
        ok = sum(float(v) for v in re.findall(r'^prefix_router_tokenize_requests_total\{[^}]*outcome="ok"[^}]*\} ([0-9.eE+-]+)$', text, re.M))
        failed = sum(float(v) for v in re.findall(r'^prefix_router_tokenize_requests_total\{[^}]*outcome="failed"[^}]*\} ([0-9.eE+-]+)$', text, re.M))
        rows[source].append(dict(round=r, p50=run["ttft_p50_s"], p90=run["ttft_p90_s"], hit=run["hit_rate"],
                                 errors=run["errors"], decision=ds / dn if dn else float("nan"),
                                 tokenize=ts / tn if tn else float("nan"), ok=ok, failed=failed))
print("| run | TTFT P50 | TTFT P90 | hit rate | errors | mean decision | mean /tokenize | /tokenize ok / failed |")
print("|---|---|---|---|---|---|---|---|")
for source in rows:
    for x in rows[source]:
        tok = "-" if x["tokenize"] != x["tokenize"] else f'{x["tokenize"]*1e3:.3f} ms'
        print(f'| {source} #{x["round"]} | {x["p50"]:.3f} s | {x["p90"]:.3f} s | {x["hit"]*100:.1f}% | {x["errors"]} | '
              f'{x["decision"]*1e6:.1f} us | {tok} | {int(x["ok"])} / {int(x["failed"])} |')
if any(x["errors"] for s in rows for x in rows[s]):
    print("tokenize-cost: some requests failed (see the bench logs)", file=sys.stderr)
    sys.exit(1)
med = {s: {k: statistics.median(x[k] for x in rows[s]) for k in ("p50", "p90", "hit", "decision")} for s in rows}
print()
print(f'medians: local decision {med["local"]["decision"]*1e6:.1f} us, engine {med["engine"]["decision"]*1e6:.1f} us '
      f'(x{med["engine"]["decision"]/med["local"]["decision"]:.1f}); TTFT P50 engine/local {med["engine"]["p50"]/med["local"]["p50"]:.3f}, '
      f'P90 {med["engine"]["p90"]/med["local"]["p90"]:.3f}; hit rate local {med["local"]["hit"]*100:.1f}%, engine {med["engine"]["hit"]*100:.1f}%')
bad = [x for s in rows for x in rows[s] if x["errors"]] + [x for x in rows["engine"] if x["failed"] or not x["ok"]]
sys.exit(1 if bad else 0)
PY
