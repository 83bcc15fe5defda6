#!/usr/bin/env bash
# Flow control's acceptance runs in `simulate` (issue 23, docs/flow-control.md "In the
# simulator"), out of CI. Long-context on 7 instances of llama-70b-h100x8, the gateway's default
# strategy, seeds 1-3.
#
# 1. The ceiling (knee): at the overloaded load below, seed 1, 600 s, with the queue, max_in_flight
#    250..2000: the smallest ceiling whose completed throughput is at least 0.97x the best is the
#    one used after (a ceiling admits what the engines complete fastest; above the knee their own
#    queues and evictions grow, below it they idle). Chosen by flow_control_tables.py, not typed.
# 2. Two tenant classes, interactive (band 1, 20% of requests) and batch (band 0, 80%), at 150%
#    of random's saturation (the issue's load) and at 450% (three times it: the default strategy
#    keeps up with 150% and 300% without any limit, see docs/flow-control.md), 1,800 s each, three
#    ways: the queue (max_in_flight at the knee, max_queue 10000, the gateway's default
#    max_queue_wait 10 s), the same ceiling with plain 429s, and no ceiling.
# 3. Fairness: two tenants in band 0 at half the load each, then one of them at 10x its half
#    (--tenants a:0:0.5,b:0:5), with the queue, with and without fairness, at both loads, 900 s.
#
# Usage: scripts/flow-control.sh   (after scripts/setup.sh and scripts/build.sh release)
#   PREFIX_ROUTER (default build/release/src/prefix-router), FLOW_OUT (default
#   proof-results/flow-control), FLOW_SEEDS (1,2,3), FLOW_DURATION (1800), FLOW_FAIR_DURATION (900),
#   FLOW_JOBS (one per core).
# Writes FLOW_OUT/<run>.json and .txt, and FLOW_OUT/tables.md (printed at the end).
# Measured on 2026-12-04 on the 2-core VM: about 20 minutes of wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
main() {
  local bin=${PREFIX_ROUTER:-build/release/src/prefix-router}
  local out=${FLOW_OUT:-proof-results/flow-control}
  local seeds=${FLOW_SEEDS:-1,2,3}
  local duration=${FLOW_DURATION:-1800}
  local fair_duration=${FLOW_FAIR_DURATION:-900}
  local jobs=${FLOW_JOBS:-$(nproc)}
  local strategy
  [[ -x "$bin" ]] || { echo "no $bin: run scripts/build.sh release first" >&2; exit 1; }
  strategy=$("$bin" simulate --help | grep -o '[a-z-]* is the gateway.s default strategy' | cut -d' ' -f1)
  [[ -n "$strategy" ]] || { echo "could not read the default strategy from simulate --help" >&2; exit 1; }
  mkdir -p "$out"
  local common=(--workload long-context --instances 7 --strategy "$strategy" --no-bounds --quiet
                --saturation-duration 600 --jobs "$jobs")
  local classes=interactive:1:0.2,batch:0:0.8
  run() {  # NAME ARGS...
    local name=$1; shift
    echo "== $name: simulate $*" >&2
    "$bin" simulate "${common[@]}" "$@" --json "$out/$name.json" > "$out/$name.txt"
  }
  local knee_load=450
  for m in 250 500 750 1000 1500 2000; do
    run "knee-$m" --load $knee_load --seed 1 --duration 600 --tenants $classes \
      --max-in-flight "$m" --max-queue 10000 --label-suffix "+m$m"
  done
  local ceiling
  ceiling=$(python3 scripts/flow_control_tables.py "$out" --knee)
  echo "ceiling at the knee: $ceiling" >&2
  for load in 150 450; do
    run "queue-$load" --load $load --seed "$seeds" --duration "$duration" --tenants $classes \
      --max-in-flight "$ceiling" --max-queue 10000 --label-suffix +queue
    run "plain-$load" --load $load --seed "$seeds" --duration "$duration" --tenants $classes \
      --max-in-flight "$ceiling" --label-suffix +429
    run "none-$load" --load $load --seed "$seeds" --duration "$duration" --tenants $classes --label-suffix +none
    run "fair-normal-$load" --load $load --seed "$seeds" --duration "$fair_duration" --tenants a:0:0.5,b:0:0.5 \
      --max-in-flight "$ceiling" --max-queue 10000 --label-suffix +normal
    run "fair-flood-$load" --load $load --seed "$seeds" --duration "$fair_duration" --tenants a:0:0.5,b:0:5 \
      --max-in-flight "$ceiling" --max-queue 10000 --label-suffix +flood
    run "fifo-flood-$load" --load $load --seed "$seeds" --duration "$fair_duration" --tenants a:0:0.5,b:0:5 \
      --max-in-flight "$ceiling" --max-queue 10000 --no-fairness --label-suffix +flood-fifo
  done
  python3 scripts/flow_control_tables.py "$out" > "$out/tables.md"
  cat "$out/tables.md"
}
main "$@"
