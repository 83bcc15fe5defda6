#!/usr/bin/env bash
# The robustness matrix (issue item 2), out of CI: every strategy on 21 cells, seeds 1-6, in
# `simulate`, with the acceptance checks as pass/fail per cell (scripts/robustness_tables.py).
#
# Cells (7 instances of llama-70b-h100x8 at 70% of random's saturation unless the cell says
# otherwise; one `simulate` sweep per group below, all strategies and seeds in it):
#   mooncake-1x, -2x, -3x       the Mooncake conversation trace (timed arrivals, open loop) at
#                               --trace-speed 1, 2, 3: the first half (until_s=1800) at every seed,
#                               the held-out second half (from_s=1800) at the tuning seeds
#   long-context-prefix         --prefix-length 1024, 2048, 8192 (three cells)
#   agentic-tenant, -session    agentic, cache_key=tenant / cache_key=session
#   rag                         rag at its defaults
#   long-context-docs16000      long-context with 16,000 documents (far more than the fleet holds)
#   long-context-zipf0.8, -1.2  long-context, popularity=zipf:0.8 / zipf:1.2
#   long-context-load           --load 30, 70, 110, 200, 300 (% of random's saturation; 5 cells)
#   long-context-fleet          --instances 3, 7, 12, 32 (4 cells)
# Strategies: random, least-outstanding-requests, prefix-aware, prefix-aware-least-loaded,
# cache-aware, kv-aware, the default (DEFAULT_STRATEGY below, added unless already listed), and
# the peers' re-implementations: sglang-cache-aware, sglang-cache-aware-min-load, llm-d-prefix,
# dynamo-kv, haproxy-chash-bl-f0 (HAProxy's default) and haproxy-chash-bl-f150 (its docs' example,
# = haproxy-chash-bl).
# Seeds: 1-3 for tuning; 4-6 held out (never used for tuning), as is the trace's second half
# (requests after the first 1,800 s); both reported in the same tables with the same checks.
#
# Durations (model time; warm-up excluded from every figure): long-context, agentic and rag cells
# 600 s with 150 s warm-up; random's saturation (for --load) from a 600 s closed-loop run (200 s
# warm-up) per (workload, fleet size, seed); the Mooncake cells replay each half whole
# (1,800 s / speed of trace, the first 300 s / speed as warm-up).
# Measured on 2026-12-02, Release build, one seed, 12 strategies, --jobs 2, on the project's
# 2-core VM shared with other builds (load average 6-11, so wall times are about twice what an
# idle machine gives; CPU time = user + system of simulate's threads):
#   sweep (cells)                     wall    CPU     load avg
#   long-context-prefix (3)           165 s   -       ~10
#   agentic-tenant                    106 s   -       ~10
#   agentic-session                   145 s   -       ~10
#   rag                               150 s   -       ~10
#   long-context-docs16000            178 s   87 s    10.9
#   long-context-zipf0.8 / zipf1.2     72 s   43 s    9.2   /  58 s   55 s   6.4
#   long-context-load (5)             612 s   354 s   8.3
#   long-context-fleet (4)            510 s   300 s   7.5
#   mooncake-Nx, each half            117-156 s  74-81 s  6-9 (per speed and half, 6 sweeps)
# (CPU of the first four estimated at 0.55 x wall, the ratio of the others at that load.)
# Per seed about 1,150 CPU s without Mooncake (12 strategies; a `default` strategy of its own
# would add one twelfth); the matrix (6 seeds; Mooncake first halves at 6
# seeds, second halves at 3) about 6 x 1,150 + 27 x 78 = 9,000 CPU s = 150 CPU-minutes: about
# 75 minutes of wall time on 2 otherwise idle cores, about 2.3 hours on the shared VM as
# measured. ROBUSTNESS_DURATION shortens it (the Mooncake replays do not shorten).
#
# Outputs, in $ROBUSTNESS_OUT (default proof-results/robustness): <group>.json (simulate's results),
# <group>.txt (its table), <group>.err (its progress), manifest.jsonl (one line per group: status,
# wall time, expected runs), matrix.json (the matrix's settings), tables.md (the markdown for
# docs/proof.md), summary.json (every figure and check, machine-readable), report.html (every run,
# `prefix-router report`, one block per cell), all-runs.json (its input: the runs with their cell
# in the workload name). The committed copy keeps <group>.json and report.html xz-compressed
# (robustness_tables.py reads <group>.json.xz as well) and drops all-runs.json, which
# `robustness_tables.py DIR --report-input FILE` writes again.
#
# Usage: scripts/robustness.sh [--smoke]   (after scripts/setup.sh and scripts/build.sh release)
#   --smoke or ROBUSTNESS_SMOKE=1: seed 1, three cells (long-context-prefix at 2048 only,
#     agentic-tenant, long-context-load at 110% only), 30 s runs: checks the pipeline, for CTest.
#   PREFIX_ROUTER        the binary (default build/release/src/prefix-router)
#   MOONCAKE_TRACE       the trace (default ../shared/data/mooncake/conversation_trace.jsonl from
#                        the repository root); the Mooncake cells are skipped with a message when
#                        `simulate` does not know the workload, and the script stops when it does
#                        but the file is missing
#   ROBUSTNESS_OUT, ROBUSTNESS_SEEDS (1,2,3,4,5,6), ROBUSTNESS_TUNING_SEEDS (1,2,3),
#   ROBUSTNESS_CELLS (comma-separated group names, default all), ROBUSTNESS_DURATION (600),
#   ROBUSTNESS_SATURATION_DURATION (600), ROBUSTNESS_JOBS (one per core),
#   ROBUSTNESS_CELL_TIMEOUT (seconds before a sweep counts as stalled, default 1,200 per seed),
#   ROBUSTNESS_DEFAULT (overrides DEFAULT_STRATEGY),
#   ROBUSTNESS_STRATEGIES (comma-separated: run only these, no peers added; to rerun the rows of
#                        the strategies a change touches, merged into a full run's groups with
#                        scripts/robustness_merge.py; the tables need a full run's strategies).
# Exit status: 0 when every group ran and wrote every run (the acceptance checks are reported,
# pass or fail, not turned into the exit status); 1 when a group failed, stalled or lost runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# The whole script is one function, read before it runs: editing the file during a run is safe.
main() {

# The product's default strategy is the one `route` (and `serve`) use without --strategy
# (kDefaultStrategy in src/core/policy.h), read from the binary below; robustness_tables.py
# finds the default's rows by this name (matrix.json records it). ROBUSTNESS_DEFAULT overrides it.
# shellcheck disable=SC2086  # split on the commas
count() { local IFS=,; set -- $1; echo $#; }  # count A,B,C: 3
bin=${PREFIX_ROUTER:-build/release/src/prefix-router}
[ -x "$bin" ] || { echo "robustness.sh: no prefix-router binary at $bin (build it, or set PREFIX_ROUTER)" >&2; exit 1; }
DEFAULT_STRATEGY=${ROBUSTNESS_DEFAULT:-$(echo '{"model":"m","messages":[{"role":"user","content":"x"}]}' |
  "$bin" route --instances 1 - | sed -n 's/.*"strategy":"\([^"]*\)".*/\1/p')}
[ -n "$DEFAULT_STRATEGY" ] || { echo "robustness.sh: cannot read the default strategy from $bin route" >&2; exit 1; }
out=${ROBUSTNESS_OUT:-proof-results/robustness}
trace=${MOONCAKE_TRACE:-../shared/data/mooncake/conversation_trace.jsonl}
smoke=${ROBUSTNESS_SMOKE:-0}
[ "${1:-}" = --smoke ] && smoke=1
seeds=${ROBUSTNESS_SEEDS:-1,2,3,4,5,6}
tuning_seeds=${ROBUSTNESS_TUNING_SEEDS:-1,2,3}
duration=${ROBUSTNESS_DURATION:-600}
sat_duration=${ROBUSTNESS_SATURATION_DURATION:-600}
jobs=${ROBUSTNESS_JOBS:-$(nproc)}
cell_timeout=${ROBUSTNESS_CELL_TIMEOUT:-}
cells=${ROBUSTNESS_CELLS:-all}
trace_half_s=1800  # the tuning half of the trace: requests recorded in its first 1,800 s
trace_warmup_s=300 # of trace time, divided by the speed

strategies="random,least-outstanding-requests,prefix-aware,prefix-aware-least-loaded,cache-aware,kv-aware"
peers="sglang-cache-aware,sglang-cache-aware-min-load,llm-d-prefix,dynamo-kv,haproxy-chash-bl-f0,haproxy-chash-bl-f150"
case ",$strategies," in *",$DEFAULT_STRATEGY,"*) ;; *) strategies="$strategies,$DEFAULT_STRATEGY" ;; esac
strategies="$strategies,$peers"
[ -n "${ROBUSTNESS_STRATEGIES:-}" ] && strategies=$ROBUSTNESS_STRATEGIES

# Smoke: seed 1, three cells, 30 s of model time each (and 30 s saturation runs): the figures
# mean little, the run checks that every step works. 83 s of wall time (76 s CPU) under the
# ASan+UBSan Debug build at load average 4-5 on the 2-core VM; 3-5 s in Release.
smoke_prefix=() smoke_load=()
if [ "$smoke" = 1 ]; then
  seeds=1 tuning_seeds=1 duration=${ROBUSTNESS_DURATION:-30} sat_duration=${ROBUSTNESS_SATURATION_DURATION:-30}
  cells=${ROBUSTNESS_CELLS:-long-context-prefix,agentic-tenant,long-context-load}
  smoke_prefix=(2048) smoke_load=(110)
fi
warmup=$((duration / 4))
# A sweep that runs past this counts as stalled: 20 minutes per seed, twice the time one
# seed of the heaviest sweep (long-context-load) took on the shared VM.
[ -n "$cell_timeout" ] || cell_timeout=$((1200 * $(count "$seeds")))

mkdir -p "$out"
: >"$out/manifest.jsonl"
want() { [ "$cells" = all ] || case ",$cells," in *",$1,"*) true ;; *) false ;; esac; }

# The Mooncake cells need `simulate --workload mooncake` and the trace.
mooncake=1
if want mooncake-1x || want mooncake-2x || want mooncake-3x; then
  probe=$("$bin" simulate --workload mooncake --strategy random --rate 1 --duration 1 --no-bounds --quiet 2>&1 || true)
  if grep -q "unknown workload 'mooncake'" <<<"$probe"; then
    echo "robustness.sh: skipping the Mooncake cells: this prefix-router's simulate has no 'mooncake' workload ($bin)" >&2
    mooncake=0
  elif [ ! -f "$trace" ]; then
    echo "robustness.sh: the Mooncake trace is missing: $trace (set MOONCAKE_TRACE to conversation_trace.jsonl, or leave the mooncake cells out with ROBUSTNESS_CELLS)" >&2
    exit 1
  else
    trace=$(cd "$(dirname "$trace")" && pwd)/$(basename "$trace")
  fi
else
  mooncake=0
fi

cat >"$out/matrix.json" <<EOF
{"default_strategy": "$DEFAULT_STRATEGY", "strategies": "$strategies", "peers": "$peers",
 "seeds": "$seeds", "tuning_seeds": "$tuning_seeds", "duration_s": $duration, "warmup_s": $warmup,
 "saturation_duration_s": $sat_duration, "trace_half_s": $trace_half_s, "smoke": $smoke,
 "mooncake": $mooncake, "binary": "$bin", "started": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
EOF

failed=0
# run GROUP LABEL SPLIT PART PARAMS EXPECTED SEEDS ARGS...: one simulate sweep, its manifest line.
#   SPLIT: the settings key that tells the group's cells apart (prefix_length, load_pct,
#   instances) or "-"; PART: tuning (seeds split into tuning and held out) or held-out-half;
#   PARAMS: the workload parameters, for the tables (empty: the workload's defaults).
run() {
  local group=$1 label=$2 split=$3 part=$4 params=$5 expected=$6 run_seeds=$7
  shift 7
  local f="$out/$group.json" status=ok code=0
  echo "robustness: $group ($expected runs)" >&2
  # Wall time, and CPU time (user + system, every thread), which shared machines inflate less.
  local TIMEFORMAT='%R %U %S'
  { time timeout "$cell_timeout" "$bin" simulate "$@" --strategy "$strategies" --seed "$run_seeds" \
    --jobs "$jobs" --no-bounds --json "$f" >"$out/$group.txt" 2>"$out/$group.err" || code=$?; } 2>"$out/$group.time"
  if [ "$code" = 124 ]; then status=stalled; elif [ "$code" != 0 ]; then status=failed; fi
  local got=0
  [ -f "$f" ] && [ "$status" = ok ] && got=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$f")
  [ "$status" = ok ] && [ "$got" != "$expected" ] && status=incomplete
  if [ "$status" != ok ]; then
    failed=1
    echo "robustness: $group $status (exit $code, $got of $expected runs): $(tail -1 "$out/$group.err")" >&2
  fi
  local wall cpu load
  read -r wall cpu < <(python3 -c "import sys; r, u, s = map(float, open(sys.argv[1]).read().split()[-3:]); print(round(r, 1), round(u + s, 1))" "$out/$group.time")
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
  printf '{"group": "%s", "label": "%s", "split": "%s", "part": "%s", "params": "%s", "file": "%s", "status": "%s", "exit_code": %d, "expected_runs": %d, "runs": %d, "seeds": "%s", "wall_s": %s, "cpu_s": %s, "load_average": %s, "args": "%s"}\n' \
    "$group" "$label" "$split" "$part" "$params" "$group.json" "$status" "$code" "$expected" "$got" \
    "$run_seeds" "$wall" "$cpu" "$load" "$*" >>"$out/manifest.jsonl"
  echo "robustness: $group $status in ${wall} s (CPU ${cpu} s, load average $load)" >&2
}

n_strat=$(count "$strategies")
n_seeds=$(count "$seeds")
n_tuning=$(count "$tuning_seeds")
lc=(--workload long-context --duration "$duration" --warmup "$warmup" --saturation-duration "$sat_duration")

if [ "$mooncake" = 1 ]; then
  for speed in 1 2 3; do
    want "mooncake-${speed}x" || continue
    d=$(python3 -c "print($trace_half_s / $speed)")
    w=$(python3 -c "print($trace_warmup_s / $speed)")
    # --rate only selects open-loop arrivals (no saturation run): the trace's timestamps set them.
    mc=(--workload mooncake --param "file=$trace" --trace-speed "$speed" --duration "$d" --warmup "$w" --rate 1)
    run "mooncake-${speed}x" "mooncake ${speed}x" - tuning "until_s=$trace_half_s" \
      $((n_strat * n_seeds)) "$seeds" "${mc[@]}" --param "until_s=$trace_half_s"
    run "mooncake-${speed}x-second-half" "mooncake ${speed}x, second half" - held-out-half "from_s=$trace_half_s" \
      $((n_strat * n_tuning)) "$tuning_seeds" "${mc[@]}" --param "from_s=$trace_half_s"
  done
fi
if want long-context-prefix; then
  lengths=(1024 2048 8192)
  [ ${#smoke_prefix[@]} -gt 0 ] && lengths=("${smoke_prefix[@]}")
  pl=$(IFS=,; echo "${lengths[*]}")
  run long-context-prefix long-context prefix_length tuning "" $((n_strat * n_seeds * ${#lengths[@]})) "$seeds" \
    "${lc[@]}" --load 70 --prefix-length "$pl"
fi
for key in tenant session; do
  want "agentic-$key" || continue
  run "agentic-$key" "agentic, cache_key=$key" - tuning "cache_key=$key" $((n_strat * n_seeds)) "$seeds" \
    --workload agentic --param "cache_key=$key" --duration "$duration" --warmup "$warmup" \
    --saturation-duration "$sat_duration" --load 70
done
if want rag; then
  run rag rag - tuning "" $((n_strat * n_seeds)) "$seeds" --workload rag --duration "$duration" \
    --warmup "$warmup" --saturation-duration "$sat_duration" --load 70
fi
if want long-context-docs16000; then
  run long-context-docs16000 "long-context, 16,000 documents" - tuning "documents=16000" \
    $((n_strat * n_seeds)) "$seeds" "${lc[@]}" --param documents=16000 --load 70
fi
for s in 0.8 1.2; do
  want "long-context-zipf$s" || continue
  run "long-context-zipf$s" "long-context, Zipf $s" - tuning "popularity=zipf:$s" $((n_strat * n_seeds)) "$seeds" \
    "${lc[@]}" --param "popularity=zipf:$s" --load 70
done
if want long-context-load; then
  loads=(30 70 110 200 300)
  [ ${#smoke_load[@]} -gt 0 ] && loads=("${smoke_load[@]}")
  ld=$(IFS=,; echo "${loads[*]}")
  run long-context-load long-context load_pct tuning "" $((n_strat * n_seeds * ${#loads[@]})) "$seeds" \
    "${lc[@]}" --load "$ld"
fi
if want long-context-fleet; then
  run long-context-fleet long-context instances tuning "" $((n_strat * n_seeds * 4)) "$seeds" \
    "${lc[@]}" --load 70 --instances 3,7,12,32
fi

# Tables (markdown and summary.json), then one HTML report of every run, one block per cell.
python3 scripts/robustness_tables.py "$out" --report-input "$out/all-runs.json" | tee "$out/tables.md"
if [ -s "$out/all-runs.json" ]; then
  "$bin" report "$out/all-runs.json" --out "$out/report.html" \
    --title "prefix-router: the robustness matrix" \
    --note "Made by scripts/robustness.sh: simulate, llama-70b-h100x8, every strategy on every cell; seeds $seeds (held out: every seed but $tuning_seeds, and the Mooncake trace's second half). Each block is one cell: the workload name carries the cell (a label added by scripts/robustness_tables.py; the figures are simulate's, unchanged). Warm-up excluded from every figure; $duration s runs ($warmup s warm-up) except the Mooncake replays (each half whole)." \
    >"$out/report.txt"
  echo "robustness: report $out/report.html, tables $out/tables.md, summary $out/summary.json" >&2
fi
# The smoke run (CTest) also checks that every output was made.
if [ "$smoke" = 1 ]; then
  for f in tables.md summary.json report.html all-runs.json; do
    [ -s "$out/$f" ] || { echo "robustness.sh: $out/$f is missing or empty" >&2; failed=1; }
  done
  grep -q "the default (\`$DEFAULT_STRATEGY\`) against the better of random" "$out/tables.md" ||
    { echo "robustness.sh: tables.md has no check of the default ($DEFAULT_STRATEGY)" >&2; failed=1; }
fi
return "$failed"
}
main "$@"
exit $?
