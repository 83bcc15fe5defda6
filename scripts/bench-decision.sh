#!/usr/bin/env bash
# Measures whole routing decisions (parse, extract, hash, place) and prints the table in docs/benchmarks.md:
# time per decision from Google Benchmark (median of repetitions) and instructions per decision
# from callgrind (repeatable on a noisy machine). The baseline, measured in the same run, is a
# content-blind random pick on the same fleet.
# Usage: scripts/bench-decision.sh [--quick]   (after scripts/build.sh release)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0; [ "${1:-}" = "--quick" ] && quick=1
bin=build/release/src
out=${OUT_DIR:-build/release/bench-results}
mkdir -p "$out"
reps=5; min_time=0.3; probe_n=200
if [ $quick = 1 ]; then reps=2; min_time=0.05; probe_n=20; fi

echo "Running decision_bench ($reps repetitions)..." >&2
"$bin/decision_bench" --benchmark_repetitions=$reps --benchmark_min_time=$min_time \
  --benchmark_report_aggregates_only=true --benchmark_format=json \
  --benchmark_out="$out/decision_bench.json" --benchmark_out_format=json >/dev/null

echo "Running placement_bench..." >&2
"$bin/placement_bench" --benchmark_min_time=$min_time --benchmark_format=json \
  --benchmark_out="$out/placement_bench.json" --benchmark_out_format=json >/dev/null

echo "Counting instructions with callgrind..." >&2
: > "$out/callgrind.tsv"
for n in 7 64 1024; do
  for c in chat native-1k native-8k native-64k random; do
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$c.$n" --toggle-collect='*RunCase*' \
      "$bin/decision_probe" "$c" "$n" "$probe_n" >/dev/null 2>"$out/cg.$c.$n.log"
    total=$(grep -E '^summary:|^totals:' "$out/cg.$c.$n" | head -1 | awk '{print $2}')
    # RunCase runs probe_n + 1 times (one warm-up call).
    echo -e "$c\t$n\t$((total / (probe_n + 1)))" >> "$out/callgrind.tsv"
  done
done

python3 - "$out/decision_bench.json" "$out/callgrind.tsv" "$out/placement_bench.json" <<'PY'
import json, sys
bench = json.load(open(sys.argv[1]))
ns = {}
for b in bench["benchmarks"]:
    if b.get("aggregate_name") != "median": continue
    name = b["run_name"]; t = b["real_time"]
    unit = {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
    ns[name] = (t * unit, b.get("label", ""))
instr = {}
for line in open(sys.argv[2]):
    c, n, i = line.split("\t"); instr[(c, int(n))] = int(i)
rows = [("chat 8k tokens (32 KB), prefix 32,768 chars", "BM_ChatDecision/{n}", "chat"),
        ("native 1 KiB, prefix 65,536 bytes", "BM_NativeDecision/1024/{n}", "native-1k"),
        ("native 8 KiB", "BM_NativeDecision/8192/{n}", "native-8k"),
        ("native 64 KiB", "BM_NativeDecision/65536/{n}", "native-64k"),
        ("baseline: random pick, no parsing", "BM_RandomDecision/{n}", "random")]
print(f"CPU: {bench['context'].get('num_cpus')} x {bench['context'].get('mhz_per_cpu')} MHz")
print()
print("| decision | instances | time (median) | instructions | time / random-pick baseline | share of 1.3 ms |")
print("|---|---:|---:|---:|---:|---:|")
for label, pattern, case in rows:
    for n in (7, 64, 1024):
        key = pattern.format(n=n)
        if key not in ns: continue
        t = ns[key][0]
        base = ns.get(f"BM_RandomDecision/{n}", (None,))[0]
        i = instr.get((case, n)) if case else None
        print(f"| {label} | {n} | {t/1000:.2f} us | {'{:,}'.format(i) if i else '-'} | "
              f"{t/base:.1f}x | {t/1.3e6*100:.2f}% |")
goal = ns.get("BM_ChatDecision/7", (None,))[0], ns.get("BM_ChatDecision/64", (None,))[0]
if all(goal):
    verdict = "met" if max(goal) < 20000 else "NOT met"
    print()
    print(f"Goal (chat decision under 20 us at 7 and 64 instances): {verdict} "
          f"({goal[0]/1000:.2f} us and {goal[1]/1000:.2f} us).")
print()
print("Placement (rendezvous hashing) over 100,000 keys:")
print()
print("| instances | first choice | full preference order | largest share deviation | keys moved when one joins, vs the expected minimum 1/(N+1) |")
print("|---:|---:|---:|---:|---:|")
pl = {b["name"]: b for b in json.load(open(sys.argv[3]))["benchmarks"]}
for n in (7, 64, 1024):
    m = pl.get(f"BM_MostPreferred/{n}"); s_ = pl.get(f"BM_SortByPreference/{n}")
    if not m or not s_: continue
    print(f"| {n} | {m['real_time']:.0f} ns | {s_['real_time']/1000:.2f} us | "
          f"{m['share_max_dev_pct']:.3f} points (ideal share {100/n:.2f}%) | {m['moved_vs_minimum']:.3f}x |")
PY
