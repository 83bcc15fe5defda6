#!/usr/bin/env bash
# The proof commands end to end: `simulate` and `demo` on small runs, their usage errors, and
# the files they write (JSON with the documented fields, CSV, a self-contained HTML report).
# Usage: proof_cli_test.sh PATH/TO/prefix-router REPO_ROOT
set -uo pipefail
bin=$1
root=${2:-.}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check NAME COMMAND...: the command must succeed
  local name=$1; shift
  if "$@" >"$work/out" 2>"$work/err"; then echo "ok   $name"; else
    echo "FAIL $name"; sed 's/^/     /' "$work/out" "$work/err" | tail -20; failures=$((failures + 1)); fi
}
expect_exit() {  # expect_exit CODE NAME COMMAND...
  local code=$1 name=$2; shift 2
  "$@" >"$work/out" 2>"$work/err"; local got=$?
  if [ "$got" = "$code" ]; then echo "ok   $name"; else
    echo "FAIL $name: exit $got, expected $code"; tail -5 "$work/err"; failures=$((failures + 1)); fi
}
fields='["workload","strategy","instances","seed","requests","errors","ttft_p50_s","ttft_p90_s","ttft_p99_s","e2e_p50_s","hit_rate","throughput_rps","output_tokens_per_s","share","overflow_rate"]'

check "simulate --help names the sweeps" sh -c "'$bin' simulate --help | grep -q -- --prefix-length"
expect_exit 2 "simulate rejects an unknown strategy" "$bin" simulate --strategy fastest --rate 1 --duration 1
expect_exit 2 "simulate rejects a bad scale event" "$bin" simulate --event grow@10 --rate 1 --duration 1
expect_exit 2 "simulate rejects an unknown workload parameter" "$bin" simulate --param nope=1 --rate 1 --duration 1
expect_exit 2 "simulate rejects two load kinds" "$bin" simulate --rate 1 --concurrency 2 --duration 1
expect_exit 2 "simulate rejects a gateway count outside 1..64" "$bin" simulate --gateways 1,65 --rate 1 --duration 1
check "simulate --gateways 1,2 runs both counts" sh -c "'$bin' simulate --profile tiny-test \
  --workload sharegpt-like --param turns_max=2 --strategy least-outstanding-requests --instances 2 \
  --gateways 1,2 --rate 5 --duration 30 --warmup 5 --json '$work/gw.json' --quiet > '$work/gw.txt'"
check "simulate --gateways labels the rows and records each count" python3 -c "
import json
assert 'least-outstanding-requests gateways=2' in open('$work/gw.txt').read()
assert sorted(r['settings']['gateways'] for r in json.load(open('$work/gw.json'))) == [1, 2]
"
check "simulate --help labels the peers' re-implementations" sh -c "'$bin' simulate --help | grep -q 'our re-implementation of SGLang'"
check "simulate runs the peers' policies" "$bin" simulate --profile tiny-test --workload sharegpt-like \
  --param system_tokens_max=300 --param user_tokens_max=200 --param reply_tokens_max=100 --param turns_max=3 \
  --strategy sglang-cache-aware,sglang-cache-aware-min-load,llm-d-prefix,haproxy-chash-bl,haproxy-chash-bl-f0 \
  --instances 2 --rate 5 --duration 30 --warmup 5 --quiet
# Flow control in simulate (docs/flow-control.md): per-class lines after the table, figures in
# the JSON's extra, usage errors.
check "simulate --tenants with a ceiling and a queue prints each class" sh -c "'$bin' simulate --profile tiny-test \
  --workload sharegpt-like --param turns_max=2 --strategy least-outstanding-requests --instances 2 --rate 40 \
  --duration 30 --warmup 5 --max-in-flight 4 --max-queue 50 --tenants interactive:1:0.2,batch:0:0.8 \
  --json '$work/flow.json' --quiet > '$work/flow.txt'"
check "simulate --tenants: the lines and the JSON agree" python3 -c "
import json
text = open('$work/flow.txt').read()
assert 'tenant interactive (priority 1)' in text and 'tenant batch (priority 0)' in text, text
assert 'max_in_flight 4,' in text, text
r = json.load(open('$work/flow.json'))[0]
x = r['extra']
assert r['settings']['max_in_flight'] == 4 and r['settings']['max_queue'] == 50, r['settings']
assert x['tenant.interactive.requests'] + x['tenant.batch.requests'] == r['requests'], x
assert x['queued'] > 0, x
"
expect_exit 2 "simulate rejects a bad tenant class" "$bin" simulate --tenants a:1 --rate 1 --duration 1
expect_exit 2 "simulate rejects --max-queue without --max-in-flight" "$bin" simulate --max-queue 5 --rate 1 --duration 1
expect_exit 2 "simulate rejects an unknown saturation" "$bin" simulate --saturation prefill --rate 1 --duration 1
check "simulate --saturation in-flight queues at every instance's threshold" sh -c "'$bin' simulate --profile tiny-test \
  --workload sharegpt-like --param turns_max=2 --strategy round-robin --instances 2 --rate 40 --duration 30 \
  --warmup 5 --saturation in-flight --threshold 2 --max-queue 50 --tenants a:0:1 \
  --json '$work/saturation.json' --quiet > '$work/saturation.txt'"
check "simulate --saturation in-flight: its line and settings" python3 -c "
import json
text = open('$work/saturation.txt').read()
assert 'every instance full at 2,' in text and 'max_in_flight' not in text, text
r = json.load(open('$work/saturation.json'))[0]
assert r['settings']['saturation_in_flight'] == 2 and 'max_in_flight' not in r['settings'], r['settings']
assert r['extra']['queued'] > 0, r['extra']
"
expect_exit 2 "demo rejects a peer's policy (simulate only)" "$bin" demo --strategy llm-d-prefix --out "$work/dp"

# A small sweep on the tiny profile: 2 strategies x 2 prefix lengths, with a scale event.
check "simulate writes json, csv and a report" "$bin" simulate --profile tiny-test \
  --workload sharegpt-like --param system_tokens_max=300 --param user_tokens_max=200 \
  --param reply_tokens_max=100 --param turns_max=3 --strategy random,prefix-aware \
  --prefix-length 1024,2048 --instances 2 --rate 5 --duration 60 --warmup 10 --event add@30 \
  --json "$work/sim.json" --csv "$work/sim.csv" --report "$work/sim.html" --quiet
check "simulate json has 4 runs with the documented fields" python3 -c "
import json, sys
runs = json.load(open('$work/sim.json'))
assert len(runs) == 4, len(runs)
for r in runs:
    missing = [f for f in $fields if f not in r]
    assert not missing, missing
    assert r['requests'] > 100 and r['errors'] == 0, r
    assert len(r['share']) == 3, r['share']  # 2 instances + the one added at 30 s
    assert abs(sum(r['share']) - 1) < 1e-9
"
check "simulate csv has a header and 4 rows" sh -c "test \$(wc -l < '$work/sim.csv') -eq 5"
check "simulate report is self-contained HTML" sh -c "grep -q '<svg' '$work/sim.html' && ! grep -qE 'https?://|<script' '$work/sim.html'"

# report: the runs of several results files in one table and one page; errors by exit code.
"$bin" simulate --profile tiny-test --workload sharegpt-like --param turns_max=2 --strategy random \
  --instances 2 --rate 5 --duration 30 --warmup 5 --label-suffix +small --json "$work/r1.json" --quiet >/dev/null 2>&1
check "report merges results files" sh -c "'$bin' report '$work/sim.json' '$work/r1.json' --out '$work/both.html' \
  --json '$work/both.json' --title 'Both' > '$work/report.txt'"
check "report keeps every run" python3 -c "
import json
runs = json.load(open('$work/both.json'))
assert len(runs) == 5, len(runs)
assert sorted(set(r['instances'] for r in runs)) == [2], runs
assert [r['strategy'] for r in runs if r['strategy'].endswith('+small')] == ['random+small'], runs
"
check "report prints the table and writes HTML" sh -c "grep -q '5 run(s) from 2 file(s)' '$work/report.txt' && \
  grep -q '<h1>Both</h1>' '$work/both.html' && ! grep -qE 'https?://|<script' '$work/both.html'"
echo '{"not": "results"}' > "$work/bad.json"
expect_exit 2 "report refuses a file that is not results" "$bin" report "$work/bad.json"
expect_exit 1 "report names a file it cannot write" "$bin" report "$work/r1.json" --out /nonexistent/dir/x.html

expect_exit 2 "demo rejects an unknown strategy" "$bin" demo --strategy fastest --out "$work/d0"
expect_exit 2 "demo needs two instances" "$bin" demo --instances 1 --out "$work/d0"
expect_exit 2 "demo needs the Mooncake file it is given" "$bin" demo --mooncake-file "$work/none.jsonl" --out "$work/d0"
# A tiny demo: real engines and gateway on loopback, 2 strategies, the three workloads (the
# Mooncake slice named from here, not the repository root, where the demo finds it itself).
check "demo runs and writes results.json and report.html" sh -c "'$bin' demo --scale 0.005 --rate 20 \
  --strategy random,prefix-aware --mooncake-file '$root/data/mooncake/conversation_trace_600s.jsonl' \
  --out '$work/demo' --quiet > '$work/demo.txt'"
check "demo results: live and simulated runs, no errors" python3 -c "
import json
runs = json.load(open('$work/demo/results.json'))
sweep = [r for r in runs if r['settings'].get('sweep')]
assert [r['settings']['prefix_length'] for r in sweep] == [1024, 2048, 8192, 32768, 65536], sweep
runs = [r for r in runs if not r['settings'].get('sweep')]
assert len(runs) == 12, len(runs)
assert sorted(set(r['workload'] for r in runs)) == ['long-context', 'mooncake', 'sharegpt-like']
# mooncake replays its slice at its own times (x2 by default), whatever --rate says.
assert all(r['settings']['trace_speed'] == 2 for r in runs if r['workload'] == 'mooncake')
assert sorted(set(r['source'] for r in runs)) == ['demo', 'simulate']
for r in runs:
    missing = [f for f in $fields if f not in r]
    assert not missing, missing
    assert r['errors'] == 0 and r['requests'] >= 10, r
    if r['source'] == 'demo':
        assert r['ttft_kind'] == 'client' and r['engine_ttft_p50_s'] > 0, r
        assert r['ttft_p50_s'] > 0 and len(r['share']) == 7
        # demo's engines report cached tokens (--enable-prompt-tokens-details): a hit rate, not n/a
        assert r['hit_rate'] is not None, r
assert max(r['hit_rate'] for r in runs if r['source'] == 'demo') > 0
"
check "demo report is self-contained HTML" sh -c "grep -q '<svg' '$work/demo/report.html' && ! grep -qE 'https?://|<script' '$work/demo/report.html'"
check "demo prints the table" grep -q "prefix-aware" "$work/demo.txt"

if [ "$failures" -gt 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all proof CLI checks passed"
