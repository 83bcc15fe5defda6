#!/usr/bin/env bash
# scripts/robustness_merge.py on the smoke matrix (the robustness.smoke test's output, $2): a
# partial rerun of one cell with a few strategies merges cleanly (the simulator is deterministic:
# the rows of unchanged strategies come out identical), and a partial run whose unchanged rows
# differ is refused without touching the full run.
set -uo pipefail
bin=$1
full=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$(dirname "$0")/test_lib.sh"

cp -r "$full" "$dir/full"
ROBUSTNESS_OUT=$dir/partial ROBUSTNESS_CELLS=agentic-tenant PREFIX_ROUTER=$bin \
  ROBUSTNESS_STRATEGIES=random,least-outstanding-requests,prefix-aware,cache-aware \
  bash "$root/scripts/robustness.sh" --smoke >"$dir/partial.log" 2>&1
check "partial smoke run" test $? = 0
merge() {
  python3 "$root/scripts/robustness_merge.py" "$dir/full" "$dir/partial" \
    --replace prefix-aware --unchanged random,least-outstanding-requests,cache-aware
}
out=$(merge 2>&1); rc=$?
check "merge succeeds" test $rc = 0
check "unchanged rows identical" bash -c "echo '$out' | grep -q 'agentic-tenant: 1 runs replaced, 3 unchanged runs identical'"
check "merge recorded" test -s "$dir/full/merges.jsonl"

# A partial run whose least-outstanding-requests row differs: refused, the full run untouched.
python3 - "$dir/partial/agentic-tenant.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))
for r in runs:
    if r["strategy"] == "least-outstanding-requests":
        r["ttft_p50_s"] *= 1.5
json.dump(runs, open(sys.argv[1], "w"))
PY
before=$(md5sum "$dir/full/agentic-tenant.json")
out=$(merge 2>&1); rc=$?
check "differing unchanged row refused" test $rc = 1
check "the refusal names the row" bash -c "echo '$out' | grep -q 'least-outstanding-requests seed 1 differs'"
check "full run untouched" test "$before" = "$(md5sum "$dir/full/agentic-tenant.json")"

summary
