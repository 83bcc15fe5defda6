#!/usr/bin/env bash
# The off-nominal cases of issue 17, one seed, 1,200 model seconds each (about 10 minutes on 2
# cores): one key for all traffic (the shared head longer than --prefix-length 1024), hot tenants
# (agentic, cache_key=tenant), rag, no reuse (16,000 documents), overload (200% of random's
# saturation) and the long-context benchmark itself, for random, least-outstanding-requests,
# prefix-aware, cache-aware and kv-aware. A quick before/after check for routing changes; the
# robustness matrix (scripts/robustness.sh) is the full, multi-seed measurement.
# Usage: scripts/issue17-cases.sh [BINARY [OUTDIR]]
#   defaults: build/release/src/prefix-router, proof-results/issue17-cases/current
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/release/src/prefix-router}
out=${2:-proof-results/issue17-cases/current}
mkdir -p "$out"
strategies=random,least-outstanding-requests,prefix-aware,cache-aware,kv-aware
run() {
  local name=$1; shift
  echo "$name: $*" >&2
  "$bin" simulate "$@" --strategy "$strategies" --duration 1200 --seed 1 --no-bounds --quiet \
    --json "$out/$name.json" > "$out/$name.txt"
}
run one-key --workload long-context --prefix-length 1024 --rate 20
run agentic-tenant --workload agentic --param cache_key=tenant
run rag --workload rag
run documents-16000 --workload long-context --param documents=16000
run load-200 --workload long-context --load 200
run long-context --workload long-context
