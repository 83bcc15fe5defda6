#!/usr/bin/env bash
# Flow control's fairness criterion (issue 23: two tenants in one band; b raising its load to 10x
# its normal share may raise a's TTFT P90 by at most 20%), taken apart in `simulate`, out of CI:
# long-context on 7 instances, the gateway's default strategy, 150% of random's saturation, seeds
# 1-3, 900 s (as flow-control.sh's fairness runs), max_queue 10000, fairness on.
#   normal      a:0:0.5,b:0:0.5 at the knee ceiling that flow-control.sh chose (read, not typed)
#   flood-M     a:0:0.5,b:0:5 at max_in_flight M: the knee ceiling, and 2/3, 1/2, 1/3, 1/5 of it
# For each, a's TTFT P90 against normal's, and where a's time went: its hit rate, its P90 wait in
# the gateway's queue and in the engines' queues; and the completed requests per second.
# Then the per-tenant bound (flow_control.max_in_flight_per_tenant), at the knee ceiling: B set to
# 1, 1.5, 2, 3 and 4 times what a tenant holds in flight on average at its half (Little's law,
# normal's tenant.a.in_flight_mean over the seeds, measured, not typed), both at their half and
# with b at 10x under the same B: a's P90 change (the criterion), and b's and the pool's
# completed requests per second (what the bound gives up).
# With --oracle it also runs the flood at the knee ceiling with engines that schedule by priority
# as vLLM's --scheduling-policy priority does (waiting requests by priority then arrival; the
# lowest priority preempted first) and tenant a always first: the patch
# proof-results/flow-control/isolation/engine-priority-oracle.patch, applied to a copy of this
# tree in a temporary git worktree and built there (about 10 minutes on 2 cores). It is the most
# any per-request engine priority could give a.
#
# Usage: scripts/flow-isolation.sh [--oracle]   (after scripts/flow-control.sh: its knee runs)
#   PREFIX_ROUTER, FLOW_OUT, FLOW_JOBS as scripts/flow-common.sh; FLOW_SEEDS (1,2,3).
# Writes FLOW_OUT/isolation/<run>.json and .txt, FLOW_OUT/isolation/table.md and bounds.md (printed).
# Measured on 2026-12-05 on the 2-core VM: about 4 minutes of wall time without --oracle.
set -euo pipefail
cd "$(dirname "$0")/.."
main() {
  local oracle=0
  case ${1:-} in
    --oracle) oracle=1 ;;
    "") ;;
    *) echo "usage: scripts/flow-isolation.sh [--oracle]" >&2; exit 2 ;;
  esac
  source scripts/flow-common.sh
  local out=$flow_out/isolation
  local seeds=${FLOW_SEEDS:-1,2,3}
  mkdir -p "$out"
  local common=(--workload long-context --instances 7 --strategy "$strategy" --load 150 --seed "$seeds"
                --duration 900 --no-bounds --quiet --saturation-duration 600 --max-queue 10000 --jobs 1)
  local pids=()
  run() {  # BIN NAME ARGS...: runs FLOW_JOBS at a time
    local run_bin=$1 name=$2; shift 2
    echo "== $name: simulate ${common[*]} $*" >&2
    "$run_bin" simulate "${common[@]}" "$@" --json "$out/$name.json" > "$out/$name.txt" &
    pids+=($!)
    if (( ${#pids[@]} >= jobs )); then wait "${pids[@]}"; pids=(); fi
  }
  local ceilings=("$ceiling" $((ceiling * 2 / 3)) $((ceiling / 2)) $((ceiling / 3)) $((ceiling / 5)))
  run "$bin" normal --tenants a:0:0.5,b:0:0.5 --max-in-flight "$ceiling"
  for m in "${ceilings[@]}"; do
    run "$bin" "flood-$m" --tenants a:0:0.5,b:0:5 --max-in-flight "$m"
  done
  if (( oracle )); then
    oracle_tree=$(mktemp -d /tmp/flow-oracle.XXXXXX)  # mktemp's template: it fills in the X's
    # The temporary worktree goes however the script ends (a patch that no longer applies, a
    # failed build).
    trap 'git worktree remove --force "$oracle_tree" 2>/dev/null || true' EXIT
    git worktree add --detach "$oracle_tree" HEAD >&2
    git -C "$oracle_tree" apply "$PWD/proof-results/flow-control/isolation/engine-priority-oracle.patch"
    cmake -S "$oracle_tree" -B "$oracle_tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPR_BUILD_TESTS=OFF \
      -DPR_BUILD_BENCHMARKS=OFF > /dev/null
    ninja -C "$oracle_tree/build" src/prefix-router >&2
    run "$oracle_tree/build/src/prefix-router" "oracle-$ceiling" --tenants a:0:0.5,b:0:5 --max-in-flight "$ceiling"
  fi
  (( ${#pids[@]} == 0 )) || wait "${pids[@]}"
  pids=()
  # The per-tenant bounds: multiples of a tenant's mean in flight at its half.
  local bounds
  read -r -a bounds < <(python3 - "$out/normal.json" <<'PY'
import json, math, sys
runs = json.load(open(sys.argv[1]))
mean = sum(r["extra"]["tenant.a.in_flight_mean"] for r in runs) / len(runs)
print(" ".join(str(math.ceil(f * mean)) for f in (1, 1.5, 2, 3, 4)))
PY
)
  for b in "${bounds[@]}"; do
    run "$bin" "normal-bound-$b" --tenants a:0:0.5,b:0:0.5 --max-in-flight "$ceiling" --max-in-flight-per-tenant "$b"
    run "$bin" "flood-bound-$b" --tenants a:0:0.5,b:0:5 --max-in-flight "$ceiling" --max-in-flight-per-tenant "$b"
  done
  (( ${#pids[@]} == 0 )) || wait "${pids[@]}"
  python3 - "$out" "${bounds[@]}" > "$out/bounds.md" <<'PY'
import json, sys
out, bounds = sys.argv[1], sys.argv[2:]
def runs(name):
    return {r["seed"]: r for r in json.load(open(f"{out}/{name}.json"))}
normal = runs("normal")
mean = sum(r["extra"]["tenant.a.in_flight_mean"] for r in normal.values()) / len(normal)
print(f"a tenant at its half holds {mean:.1f} requests in flight on average (normal, seeds "
      f"{','.join(str(s) for s in sorted(normal))}); bounds of 1, 1.5, 2, 3 and 4 times that:\n")
print("| max_in_flight_per_tenant | seed | a's P90, both at their half | a's P90, b at 10x | change "
      "| a's 429s | a's gateway queue P90 | b completed/s (at its half) | completed/s (both at half) |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for b in bounds:
    half, flood = runs(f"normal-bound-{b}"), runs(f"flood-bound-{b}")
    for seed in sorted(half):
        h, f = half[seed], flood[seed]
        hp, fp = h["extra"]["tenant.a.ttft_p90_s"], f["extra"]["tenant.a.ttft_p90_s"]
        print(f"| {b} | {seed} | {hp:.3f} s | {fp:.3f} s | {100 * (fp / hp - 1):+.1f}% | "
              f"{f['extra']['tenant.a.refused']:.0f} | {f['extra']['tenant.a.queue_wait_p90_s']:.3f} s | "
              f"{f['extra']['tenant.b.throughput_rps']:.1f} ({h['extra']['tenant.b.throughput_rps']:.1f}) | "
              f"{f['throughput_rps']:.1f} ({h['throughput_rps']:.1f}) |")
print("\nChecks (the criterion: b at 10x raises a's P90 by at most 20% against both at their half):\n")
for b in bounds:
    half, flood = runs(f"normal-bound-{b}"), runs(f"flood-bound-{b}")
    for seed in sorted(half):
        hp = half[seed]["extra"]["tenant.a.ttft_p90_s"]
        change = 100 * (flood[seed]["extra"]["tenant.a.ttft_p90_s"] / hp - 1)
        held = half[seed]["extra"]["tenant.a.queue_wait_p90_s"]
        verdict = "VOID" if held > 0 else "PASS" if change <= 20 else "FAIL"
        why = f" (void: the bound already holds a at its half, queue wait P90 {held:.3f} s)" if held > 0 else ""
        print(f"- {verdict}: max_in_flight_per_tenant {b} ({int(b) / mean:.1f}x), seed {seed}: "
              f"{change:+.1f}%{why}")
PY
  python3 - "$out" "${ceilings[@]}" > "$out/table.md" <<'PY'
import json, os, sys
out, ceilings = sys.argv[1], sys.argv[2:]
def runs(name):
    return {r["seed"]: r for r in json.load(open(f"{out}/{name}.json"))}
normal = runs("normal")
rows = [(f"b at 10x, max_in_flight {m}", f"flood-{m}") for m in ceilings]
if os.path.exists(f"{out}/oracle-{ceilings[0]}.json"):
    rows.append((f"b at 10x, max_in_flight {ceilings[0]}, engine priority oracle (a first)", f"oracle-{ceilings[0]}"))
print("| run | seed | a's P90 TTFT | vs both at their half | a's hit rate | a's gateway queue P90 | "
      "a's engine queue P90 | completed/s |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
def row(label, r, base):
    e = r["extra"]
    p90 = e["tenant.a.ttft_p90_s"]
    vs = f"{100 * (p90 / base - 1):+.0f}%" if base else "-"
    print(f"| {label} | {r['seed']} | {p90:.3f} s | {vs} | {100 * e['tenant.a.hit_rate']:.1f}% | "
          f"{e['tenant.a.queue_wait_p90_s']:.3f} s | {e.get('tenant.a.engine_queue_p90_s', 0):.3f} s | "
          f"{r['throughput_rps']:.1f} |")
for seed, r in sorted(normal.items()):
    row(f"a and b at their half, max_in_flight {ceilings[0]}", r, None)
for label, name in rows:
    for seed, r in sorted(runs(name).items()):
        row(label, r, normal[seed]["extra"]["tenant.a.ttft_p90_s"])
PY
  cat "$out/table.md"
  echo
  cat "$out/bounds.md"
}
main "$@"
