#!/usr/bin/env bash
# Flow control's deadline order (issue 23's goal, docs/flow-control.md "Deadlines"), out of CI:
# long-context on 7 instances, the gateway's default strategy, 450% of random's saturation, seeds
# 1-3, 600 s, the queue at the knee ceiling that scripts/flow-control.sh chose (read from its knee
# runs), max_queue 10000, max_queue_wait 60 s, fairness off (one flow: the classes are ordered
# together). Two classes in band 0: tight (20% of requests, TTFT objective 1 s) and loose (80%,
# 30 s), run twice: the queue ordering by their objectives (x-slo-ttft-ms: earliest deadline
# first) and ignoring them (--no-deadlines: arrival order). The figure: the share of each class's
# requests that met its objective.
#
# Usage: scripts/flow-deadlines.sh   (after scripts/flow-control.sh, whose knee runs it reads)
#   PREFIX_ROUTER (default build/release/src/prefix-router), FLOW_OUT (default
#   proof-results/flow-control; this script writes FLOW_OUT/deadlines/), FLOW_SEEDS (1,2,3),
#   FLOW_JOBS (one per core).
# Measured on 2026-12-05 on the 2-core VM: about 3 minutes of wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
main() {
  source scripts/flow-common.sh
  local out=$flow_out/deadlines
  local seeds=${FLOW_SEEDS:-1,2,3}
  mkdir -p "$out"
  local common=(--workload long-context --instances 7 --strategy "$strategy" --load 450 --seed "$seeds"
                --duration 600 --no-bounds --quiet --saturation-duration 600 --jobs "$jobs"
                --max-in-flight "$ceiling" --max-queue 10000 --max-queue-wait 60 --no-fairness)
  echo "== deadlines: simulate ${common[*]} --tenants tight:0:0.2:1000,loose:0:0.8:30000" >&2
  "$bin" simulate "${common[@]}" --tenants tight:0:0.2:1000,loose:0:0.8:30000 --label-suffix +edf \
    --json "$out/edf.json" > "$out/edf.txt"
  echo "== arrival order: the same, --no-deadlines" >&2
  "$bin" simulate "${common[@]}" --tenants tight:0:0.2:1000,loose:0:0.8:30000 --no-deadlines --label-suffix +fifo \
    --json "$out/fifo.json" > "$out/fifo.txt"
  python3 - "$out" > "$out/table.md" <<'EOF'
import json, sys
out = sys.argv[1]
edf = {r["seed"]: r for r in json.load(open(f"{out}/edf.json"))}
fifo = {r["seed"]: r for r in json.load(open(f"{out}/fifo.json"))}
print("| seed | order | tight: met 1 s | tight P90 TTFT | loose: met 30 s | loose P90 TTFT | completed/s |")
print("|---|---|---:|---:|---:|---:|---:|")
for seed in sorted(edf):
    for name, r in (("deadlines", edf[seed]), ("arrival", fifo[seed])):
        e = r["extra"]
        def cell(t):
            return f"{100 * e[f'tenant.{t}.objective_met']:.1f}%"
        print(f"| {seed} | {name} | {cell('tight')} | {e['tenant.tight.ttft_p90_s']:.2f} s | {cell('loose')} | "
              f"{e['tenant.loose.ttft_p90_s']:.2f} s | {r['throughput_rps']:.1f} |")
EOF
  cat "$out/table.md"
}
main "$@"
