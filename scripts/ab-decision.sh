#!/usr/bin/env bash
# Interleaved before/after timing of single routing decisions at scale, for a noisy machine where
# two separate runs of scripts/bench-decision.sh differ by more than the change measured: for each
# case and fleet size, three rounds of the "before" decision_probe then the "after" one, back to
# back; prints the median p50 and p99 of each (2,000 decisions per round) and the ratio of p50s.
# Usage: scripts/ab-decision.sh BEFORE_DECISION_PROBE AFTER_DECISION_PROBE [CASES] [SIZES]
#   e.g. scripts/ab-decision.sh ../base/build/r/src/decision_probe build/r/src/decision_probe
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BEFORE_DECISION_PROBE AFTER_DECISION_PROBE [CASES] [SIZES]" >&2
  exit 2
fi
before=$1
after=$2
cases=${3:-"prefix-aware prefix-aware:full prefix-aware:full-nb cache-aware cache-aware:full kv-aware kv-aware:full"}
sizes=${4:-"1024 10000"}
echo "| strategy | instances | p50 before | p50 after | after / before | p99 before | p99 after |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for n in $sizes; do
  for c in $cases; do
    rounds=()
    for r in 1 2 3; do
      rounds+=("$("$before" --latency "chat:$c" "$n" 2000 | cut -f1,2)")
      rounds+=("$("$after" --latency "chat:$c" "$n" 2000 | cut -f1,2)")
    done
    python3 - "$c" "$n" "${rounds[@]}" <<'PY'
import statistics, sys
case, n, runs = sys.argv[1], sys.argv[2], [list(map(int, r.split("\t"))) for r in sys.argv[3:]]
before, after = runs[0::2], runs[1::2]
med = lambda rs, i: statistics.median(r[i] for r in rs) / 1000
print(f"| {case} | {n} | {med(before, 0):.1f} us | {med(after, 0):.1f} us | {med(after, 0) / med(before, 0):.2f}x "
      f"| {med(before, 1):.1f} us | {med(after, 1):.1f} us |")
PY
  done
done
