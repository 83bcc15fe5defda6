#!/usr/bin/env bash
# Issue 7's comparison with the peers, in `simulate` (out of CI: about 35 minutes on 2 cores).
# Three experiments on 7 instances at 70% load, 1,200 s each (300 s warm-up), seeds 1-3:
#   long-context   the published benchmark's shape (8,000-token documents, short questions)
#   agentic        tenants' tool blocks and growing trajectories (hot shared prefixes of
#                  varied lengths, routing groups)
#   scale          long-context with an instance added at 500 s, one removed at 800 s and one
#                  replaced (cold restart) at 1,000 s
# Strategies: ours (kv-aware, cache-aware, prefix-aware at the default and at its best prefix
# length from a sweep on seed 1) against our re-implementations of the peers' published
# policies (sglang-cache-aware, llm-d-prefix, dynamo-kv, and haproxy-chash-bl at
# hash-balance-factor 0, HAProxy's default, and 150, its documentation's example; each HAProxy
# variant also at its best key length from the same sweep on seed 1, as prefix-aware), random
# for reference. Writes proof-results/peers-*.json, one report proof-results/peers.html with the
# peers table, and prints the acceptance check (scripts/peers_tables.py).
# Run after `bash scripts/build.sh release` (or set PREFIX_ROUTER). PEERS_SEEDS and
# PEERS_DURATION override the seeds and the duration (shorter runs for a quick look).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PREFIX_ROUTER:-build/release/src/prefix-router}
out=proof-results
mkdir -p "$out"
seeds=${PEERS_SEEDS:-1,2,3}
duration=${PEERS_DURATION:-1200}
warmup=$((duration / 4))
common=(--instances 7 --load 70 --duration "$duration" --warmup "$warmup" --no-bounds --quiet)
scale=(--event "add@$((duration * 5 / 12))" --event "remove:instance-3@$((duration * 2 / 3))"
       --event "replace:instance-5@$((duration * 5 / 6))")
ours=kv-aware,cache-aware,prefix-aware
haproxy=haproxy-chash-bl-f0,haproxy-chash-bl-f150
peers=sglang-cache-aware,llm-d-prefix,dynamo-kv,$haproxy
lengths=1024,2048,4096,8192,16384,32768

experiment_args() {  # experiment_args NAME: the workload and events of an experiment
  case "$1" in
    long-context) echo "--workload long-context" ;;
    agentic) echo "--workload agentic" ;;
    scale) echo "--workload long-context ${scale[*]}" ;;
  esac
}

files=()
for e in long-context agentic scale; do
  # shellcheck disable=SC2046
  read -r -a args <<<"$(experiment_args "$e")"
  # 1. prefix-aware's and each HAProxy variant's best key (prefix) length on seed 1 (lowest TTFT
  #    P90, then highest hit rate).
  "$bin" simulate "${args[@]}" "${common[@]}" --strategy "prefix-aware,$haproxy" --seed 1 \
    --prefix-length "$lengths" --json "$out/peers-$e-sweep.json" >"$out/peers-$e-sweep.txt"
  best_for() {  # best_for STRATEGY: its best prefix length in the sweep
    python3 -c "
import json, sys
runs = [r for r in json.load(open('$out/peers-$e-sweep.json')) if r['strategy'] == sys.argv[1]]
print(int(min(runs, key=lambda r: (r['ttft_p90_s'], -r['hit_rate']))['settings']['prefix_length']))" "$1"
  }
  best=$(best_for prefix-aware)
  echo "$e: prefix-aware's best prefix length on seed 1: $best"
  # 2. Everyone on every seed; the tuned prefix-aware on its own (its prefix length only).
  "$bin" simulate "${args[@]}" "${common[@]}" --strategy "random,$ours,$peers" --seed "$seeds" \
    --json "$out/peers-$e.json" | tee "$out/peers-$e.txt"
  "$bin" simulate "${args[@]}" "${common[@]}" --strategy prefix-aware --prefix-length "$best" \
    --label-suffix "-tuned" --seed "$seeds" --json "$out/peers-$e-tuned.json" >"$out/peers-$e-tuned.txt"
  files+=("$out/peers-$e.json" "$out/peers-$e-tuned.json")
  # 3. Each HAProxy variant at its own best key length, every seed.
  for h in ${haproxy//,/ }; do
    hbest=$(best_for "$h")
    echo "$e: $h's best key length on seed 1: $hbest"
    "$bin" simulate "${args[@]}" "${common[@]}" --strategy "$h" --prefix-length "$hbest" \
      --label-suffix "-tuned" --seed "$seeds" --json "$out/peers-$e-$h-tuned.json" >"$out/peers-$e-$h-tuned.txt"
    files+=("$out/peers-$e-$h-tuned.json")
  done
done
"$bin" report "${files[@]}" --out "$out/peers.html" --title "prefix-router: side by side with the peers" \
  --note "Made by scripts/peers.sh: simulate, 7 instances of llama-70b-h100x8 at 70% load, $duration s per run ($warmup s warm-up), seeds $seeds; KV events reach kv-aware and dynamo-kv 50 ms late, one batch per engine step, no loss." \
  >/dev/null
python3 scripts/peers_tables.py "${files[@]}"
