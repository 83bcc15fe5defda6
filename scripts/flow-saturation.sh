#!/usr/bin/env bash
# Flow control's two saturation signals side by side in `simulate` (issue 23, docs/flow-control.md
# "Saturation: the pool or every instance"), out of CI. Seed 1, 600 s, the gateway's default
# strategy on 7 instances, max_queue 10000:
#   pool M          flow_control.saturation pool, max_in_flight M (the queue at the pool's ceiling)
#   in-flight T     flow_control.saturation in-flight, concurrency_threshold T, no max_in_flight
# at equal totals: M = the knee ceiling that scripts/flow-control.sh chose (read from its knee
# runs, not typed) and T = M / 7; and M = 7 x 64, T = 64 (the default threshold).
# Traffic: long-context and sharegpt-like at 150% of random's saturation, two tenants in band 0 at
# their half (a:0:0.5,b:0:0.5) and with b at 10x (a:0:0.5,b:0:5); long-context at 450% with the
# interactive (band 1, 20%) and batch (band 0, 80%) classes.
#
# Usage: scripts/flow-saturation.sh   (after scripts/flow-control.sh, whose knee runs it reads)
#   PREFIX_ROUTER (default build/release/src/prefix-router), FLOW_OUT (default
#   proof-results/flow-control; this script writes FLOW_OUT/saturation/), FLOW_JOBS (one per core).
# Writes FLOW_OUT/saturation/<run>.json and .txt, and FLOW_OUT/saturation/table.md (printed).
# Measured on 2026-12-05 on the 2-core VM: about 5 minutes of wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
main() {
  source scripts/flow-common.sh
  local out=$flow_out/saturation
  local instances=7
  mkdir -p "$out"
  local common=(--instances "$instances" --strategy "$strategy" --seed 1 --duration 600 --no-bounds --quiet
                --saturation-duration 600 --max-queue 10000)
  local ways=("pool-$ceiling" "in-flight-$((ceiling / instances))" "pool-$((64 * instances))" "in-flight-64")
  way_args() {  # WAY: the flags of one way
    case $1 in
      pool-*) echo "--max-in-flight ${1#pool-}" ;;
      in-flight-*) echo "--saturation in-flight --threshold ${1#in-flight-}" ;;
    esac
  }
  local pids=()
  run() {  # NAME ARGS...: runs FLOW_JOBS at a time
    local name=$1; shift
    echo "== $name: simulate $*" >&2
    "$bin" simulate "${common[@]}" --jobs 1 "$@" --json "$out/$name.json" > "$out/$name.txt" &
    pids+=($!)
    if (( ${#pids[@]} >= jobs )); then wait "${pids[@]}"; pids=(); fi
  }
  for workload in long-context sharegpt-like; do
    for tenants in a:0:0.5,b:0:0.5 a:0:0.5,b:0:5; do
      for way in "${ways[@]}"; do
        # shellcheck disable=SC2046
        run "$workload-${tenants##*:}-$way" --workload $workload --load 150 --tenants $tenants $(way_args "$way")
      done
    done
  done
  for way in "${ways[@]:0:2}"; do
    # shellcheck disable=SC2046
    run "long-context-classes-450-$way" --workload long-context --load 450 \
      --tenants interactive:1:0.2,batch:0:0.8 $(way_args "$way")
  done
  (( ${#pids[@]} == 0 )) || wait "${pids[@]}"
  python3 - "$out" "${ways[@]}" > "$out/table.md" <<'EOF'
import json, sys
out, ways = sys.argv[1], sys.argv[2:]
def run(name):
    return json.load(open(f"{out}/{name}.json"))[0]
def cell(r, tenant):
    e = r["extra"]
    return (f'{r["hit_rate"] * 100:.1f}% | {r["throughput_rps"]:.1f} | '
            f'{e["tenant." + tenant + ".ttft_p90_s"]:.3f} | {e.get("refused", 0):.0f}')
print("| traffic | way | hit rate | completed/s | P90 TTFT of a (interactive) | 429s (all) |")
print("|---|---|---:|---:|---:|---:|")
for workload in ("long-context", "sharegpt-like"):
    for share, label in (("0.5", "a and b at their half"), ("5", "b at 10x its half")):
        for way in ways:
            print(f"| {workload} 150%, {label} | {way} | {cell(run(f'{workload}-{share}-{way}'), 'a')} |")
for way in ways[:2]:
    print(f"| long-context 450%, interactive 20% / batch 80% | {way} | "
          f"{cell(run(f'long-context-classes-450-{way}'), 'interactive')} |")
EOF
  cat "$out/table.md"
}
main "$@"
