#!/usr/bin/env bash
# The measurements behind docs/proof.md (issue 5's acceptance), out of CI: about 45 minutes on
# 2 cores. Writes everything under proof-results/ (JSON, CSV, HTML reports, terminal tables).
#   1. simulate, 1 hour of model time, seeds 1-3: long-context and sharegpt-like, four strategies
#   2. simulate sweeps on long-context: prefix length, concurrency threshold, load, fleet size
#   3. simulate scale events: add, remove and replace an instance during a long-context hour
#   4. simulate closed loop (fixed concurrency), where throughput can differ between strategies
#   5. demo (live, loopback HTTP), seeds 1-3
#   6. simulate key normalisation (issue 9): noisy-native, raw bytes against canonical JSON and
#      excluded fields, seeds 1-3, in one report (normalisation.html)
# Run after `bash scripts/build.sh release` (or set PREFIX_ROUTER to another binary). Pass a step
# number to run only that step.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PREFIX_ROUTER:-build/release/src/prefix-router}
out=proof-results
mkdir -p "$out"
step=${1:-all}
run() { [ "$step" = all ] || [ "$step" = "$1" ]; }

if run 1; then
  # long-context adds prefix-aware-least-loaded (same balance factor as prefix-aware, the other
  # spill mode) for the spill-mode goal.
  for w in long-context sharegpt-like; do
    strategies=random,least-outstanding-requests,prefix-aware-least-loaded-b0,prefix-aware
    [ "$w" = long-context ] && strategies=$strategies,prefix-aware-least-loaded
    "$bin" simulate --workload "$w" --strategy "$strategies" --seed 1,2,3 --duration 3600 \
      --warmup 600 --load 70 --json "$out/sim-$w.json" --csv "$out/sim-$w.csv" \
      --report "$out/sim-$w.html" | tee "$out/sim-$w.txt"
  done
fi
if run 2; then
  "$bin" simulate --workload long-context --strategy random,prefix-aware,prefix-aware-least-loaded-b0 \
    --prefix-length 1024,2048,8192,32768,65536 --duration 1800 --warmup 300 --rate 20 --no-bounds \
    --json "$out/sweep-prefix.json" --report "$out/sweep-prefix.html" | tee "$out/sweep-prefix.txt"
  "$bin" simulate --workload long-context --strategy prefix-aware,prefix-aware-least-loaded-b0 \
    --threshold 4,8,12,16,64 --concurrency 56 --duration 1800 --warmup 300 --no-bounds \
    --json "$out/sweep-threshold.json" --report "$out/sweep-threshold.html" | tee "$out/sweep-threshold.txt"
  "$bin" simulate --workload long-context --strategy random,prefix-aware --load 30,50,70,90,110 \
    --duration 1800 --warmup 300 --no-bounds \
    --json "$out/sweep-load.json" --report "$out/sweep-load.html" | tee "$out/sweep-load.txt"
  "$bin" simulate --workload long-context --strategy random,prefix-aware --instances 2,4,7,14 \
    --param documents=640 --load 70 --duration 1800 --warmup 300 --no-bounds \
    --json "$out/sweep-fleet.json" --report "$out/sweep-fleet.html" | tee "$out/sweep-fleet.txt"
fi
if run 3; then
  "$bin" simulate --workload long-context --strategy random,prefix-aware --rate 20 --duration 3600 \
    --warmup 600 --window 60 --event add@1200 --event remove:instance-3@2000 \
    --event replace:instance-5@2800 --no-bounds \
    --json "$out/scale.json" --report "$out/scale.html" | tee "$out/scale.txt"
fi
if run 4; then
  "$bin" simulate --workload long-context --strategy random,least-outstanding-requests,prefix-aware \
    --concurrency 56 --duration 1800 --warmup 300 --no-bounds \
    --json "$out/closed.json" --report "$out/closed.html" | tee "$out/closed.txt"
fi
if run 5; then
  for seed in 1 2 3; do
    "$bin" demo --seed "$seed" --out "$out/demo-seed$seed" | tee "$out/demo-seed$seed.txt"
  done
fi
if run 6; then
  # Each variant is a run of its own (the same strategy, another key): norm-<variant>.json.
  common=(--workload noisy-native --seed 1,2,3 --duration 600 --rate 16.5 --no-bounds)
  "$bin" simulate "${common[@]}" --strategy random --json "$out/norm-random.json" | tee "$out/norm-random.txt"
  "$bin" simulate "${common[@]}" --strategy prefix-aware --json "$out/norm-raw.json" | tee "$out/norm-raw.txt"
  "$bin" simulate "${common[@]}" --strategy prefix-aware --canonical-json true --label-suffix "+canonical" \
    --json "$out/norm-canonical.json" | tee "$out/norm-canonical.txt"
  "$bin" simulate "${common[@]}" --strategy prefix-aware --exclude-field id --exclude-field created \
    --exclude-field metadata.trace_id --label-suffix "+canonical-3-fields" \
    --json "$out/norm-excluded.json" | tee "$out/norm-excluded.txt"
  # The four variants in one table and one report.
  "$bin" report "$out/norm-random.json" "$out/norm-raw.json" "$out/norm-canonical.json" \
    "$out/norm-excluded.json" --out "$out/normalisation.html" --title "Key normalisation on noisy-native" \
    --note "Made by scripts/proof.sh 6: the noisy-native workload (the long-context benchmark sent by six clients that serialise JSON differently, each body with an id, a creation time and a trace id), 7 instances, 600 s at 16.5 requests/s, seeds 1-3. prefix-aware keys raw body bytes (the managed service's key), +canonical keys canonical JSON, +canonical-3-fields also leaves out id, created and metadata.trace_id." \
    | tee "$out/normalisation.txt"
fi
