#!/usr/bin/env bash
# Measures whole routing decisions (parse, extract, hash, place) and prints the table in docs/benchmarks.md:
# time per decision from Google Benchmark (median of repetitions) and instructions per decision
# from callgrind (repeatable on a noisy machine). The baseline, measured in the same run, is a
# content-blind random pick on the same fleet. Then decisions at scale (issue 12): the chat request
# under every strategy of the registry on 1,024 and 10,000 instances, idle and with its first
# choice full (the spill path): p50 and p99 of per-decision times (decision_probe --latency),
# instructions, and heap per instance (decision_probe's counting allocator); and index_bench's
# kv-aware cases: index ingest rate and decisions while events stream in.
# Usage: scripts/bench-decision.sh [--quick | --tables]   (after scripts/build.sh release;
# BIN_DIR=build/r/src to measure another build tree; --tables prints the tables again from the
# results in OUT_DIR without measuring; BEFORE_DIR=<another run's OUT_DIR> adds a table of
# instructions per decision, before and after)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0; [ "${1:-}" = "--quick" ] && quick=1
tables_only=0; [ "${1:-}" = "--tables" ] && tables_only=1
bin=${BIN_DIR:-build/release/src}
out=${OUT_DIR:-build/release/bench-results}
mkdir -p "$out"
reps=5; min_time=0.3; probe_n=200; latency_n=2000
if [ $quick = 1 ]; then reps=2; min_time=0.05; probe_n=20; latency_n=50; fi
sizes="7 64 1024 10000"
scale_sizes="1024 10000"
scale_cases="random least-outstanding-requests round-robin prefix-aware prefix-aware:full prefix-aware:full-nb
cache-aware cache-aware:full kv-aware kv-aware:full dynamo-kv"
if [ $quick = 1 ]; then sizes="7 1024"; scale_sizes="1024"; scale_cases="prefix-aware:full kv-aware"; fi

if [ $tables_only = 0 ]; then
echo "Running decision_bench ($reps repetitions)..." >&2
filter=.
[ $quick = 1 ] && filter='/(7|1024)$'
"$bin/decision_bench" --benchmark_filter="$filter" --benchmark_repetitions=$reps --benchmark_min_time=$min_time \
  --benchmark_report_aggregates_only=true --benchmark_format=json \
  --benchmark_out="$out/decision_bench.json" --benchmark_out_format=json >/dev/null

echo "Running placement_bench..." >&2
"$bin/placement_bench" --benchmark_min_time=$min_time --benchmark_format=json \
  --benchmark_out="$out/placement_bench.json" --benchmark_out_format=json >/dev/null

echo "Running index_bench (kv-aware index and decisions)..." >&2
"$bin/index_bench" --benchmark_filter='Pick|Ingest' --benchmark_min_time=$min_time --benchmark_format=json \
  --benchmark_out="$out/index_bench.json" --benchmark_out_format=json >/dev/null

echo "Timing single decisions at scale..." >&2
: > "$out/latency.tsv"
for n in $scale_sizes; do
  for c in $scale_cases; do
    echo -e "$c\t$n\t$("$bin/decision_probe" --latency "chat:$c" "$n" "$latency_n")" >> "$out/latency.tsv"
  done
done

echo "Counting instructions with callgrind..." >&2
: > "$out/callgrind.tsv"
cg() {  # case instances
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1.$2" --toggle-collect='*RunCase*' \
    "$bin/decision_probe" "$1" "$2" "$probe_n" >/dev/null 2>"$out/cg.$1.$2.log"
  total=$(grep -E '^summary:|^totals:' "$out/cg.$1.$2" | head -1 | awk '{print $2}')
  # RunCase runs probe_n + 1 times (one warm-up call).
  echo -e "$1\t$2\t$((total / (probe_n + 1)))" >> "$out/callgrind.tsv"
}
for n in $scale_sizes; do
  for c in $scale_cases; do cg "chat:$c" "$n"; done
done
for n in $sizes; do
  for c in chat native-1k native-8k native-64k random; do cg "$c" "$n"; done
done
fi

python3 - "$out/decision_bench.json" "$out/callgrind.tsv" "$out/placement_bench.json" "$out/latency.tsv" \
  "$out/index_bench.json" "${BEFORE_DIR:+$BEFORE_DIR/callgrind.tsv}" <<'PY'
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
sizes = (7, 64, 1024, 10000)
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
    for n in sizes:
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
for n in (7, 64, 1024, 10000):
    m = pl.get(f"BM_MostPreferred/{n}"); s_ = pl.get(f"BM_SortByPreference/{n}")
    if not m or not s_: continue
    print(f"| {n} | {m['real_time']:.0f} ns | {s_['real_time']/1000:.2f} us | "
          f"{m['share_max_dev_pct']:.3f} points (ideal share {100/n:.2f}%) | {m['moved_vs_minimum']:.3f}x |")

lat = {}
for line in open(sys.argv[4]):
    f = line.rstrip("\n").split("\t")
    lat[(f[0], int(f[1]))] = [float(x) for x in f[2:7]]
print()
print("Decisions at scale: the chat request (32 KB) parsed, keyed and routed by each strategy; per-decision")
print("p50 and p99 of single timed decisions (decision_probe --latency), instructions per decision")
print("(callgrind), heap per instance (counting operator new: fleet snapshot; policy with the state the")
print("case fed it; what the decisions added, per-thread scratch included). `full`: the first choice is")
print("at the concurrency threshold; `full-nb`: the same with balance factor 0.")
print()
print("| strategy | instances | p50 | p99 | instructions | fleet B/instance | policy B/instance | decisions' scratch B/instance |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for (c, n), (p50, p99, fleet_b, policy_b, scratch_b) in lat.items():
    i = instr.get((f"chat:{c}", n))
    print(f"| {c} | {n} | {p50/1000:.2f} us | {p99/1000:.2f} us | {'{:,}'.format(i) if i else '-'} | "
          f"{fleet_b:.0f} | {policy_b:.0f} | {scratch_b:.0f} |")
ib = json.load(open(sys.argv[5]))["benchmarks"]
print()
print("kv-aware index and decisions (index_bench; pure core, no parsing):")
print()
print("| benchmark | time per iteration | block events per second |")
print("|---|---:|---:|")
ingest = {}
for b in ib:
    unit = {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
    rate = b.get("block_events_per_second", b.get("block_events_per_second_meanwhile"))
    if "block_events_per_second" in b: ingest[b["name"]] = rate
    print(f"| {b['name']} | {b['real_time']*unit/1000:.2f} us | {'{:,.0f}'.format(rate) if rate else '-'} |")
print()
def verdict(ok): return "met" if ok else "NOT met"
def p50(c, n=10000): return lat.get((c, n), [None])[0]
checks = [("prefix-aware p50 under 40 us", ["prefix-aware", "prefix-aware:full", "prefix-aware:full-nb"], 40e3),
          ("cache-aware and kv-aware p50 under 60 us", ["cache-aware", "cache-aware:full", "kv-aware", "kv-aware:full"], 60e3),
          ("goal: prefix-aware p50 under 20 us", ["prefix-aware", "prefix-aware:full", "prefix-aware:full-nb"], 20e3)]
for label, cases, limit in checks:
    got = [(c, p50(c)) for c in cases if p50(c) is not None]
    if not got: continue
    print(f"At 10,000 instances, {label}: {verdict(all(t < limit for _, t in got))} "
          f"({', '.join(f'{c} {t/1000:.2f} us' for c, t in got)}).")
# The index's own rate: decoded values (BM_KvIndexIngest/instances/0/known); msgpack decoding is
# reported beside it (/1/).
for label, limit in (("at least 2 million", 2e6), ("goal: at least 10 million", 10e6)):
    got = {k: v for k, v in ingest.items() if k.split("/")[2] == "0"}
    if not got: continue
    print(f"kv-aware index ingest {label} block events per second on one core: "
          f"{verdict(all(v >= limit for v in got.values()))} ({', '.join(f'{k} {v/1e6:.2f}M' for k, v in got.items())}).")
if len(sys.argv) > 6 and sys.argv[6]:
    before = {}
    for line in open(sys.argv[6]):
        c, n, i = line.split("\t"); before[(c, int(n))] = int(i)
    print()
    print("Instructions per decision (callgrind), before (BEFORE_DIR) and after (this run):")
    print()
    print("| case | instances | before | after | after / before |")
    print("|---|---:|---:|---:|---:|")
    keys = sorted((k for k in instr if k in before), key=lambda k: (not k[0].startswith("chat:"), k[1]))
    for k in keys:
        print(f"| {k[0]} | {k[1]} | {before[k]:,} | {instr[k]:,} | {instr[k]/before[k]:.2f} |")
PY
