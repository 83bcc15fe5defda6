#!/usr/bin/env bash
# Behaviour of `prefix-router bench` from the command line, against an engine emulator this
# script starts (tiny-test profile, time-scaled, on an ephemeral port read from its log). Run by
# CTest with the binary's path as $1 and the repository root as $2.
set -uo pipefail
bin=$1
root=${2:-.}
fails=0; passes=0
check() {  # check NAME COMMAND...: passes when the command succeeds
  local name=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
engine_pid=
plain_pid=
component_pids=()
cleanup() {
  if [ -n "$engine_pid" ]; then kill -TERM "$engine_pid" 2>/dev/null; wait "$engine_pid" 2>/dev/null; fi
  if [ -n "$plain_pid" ]; then kill -TERM "$plain_pid" 2>/dev/null; wait "$plain_pid" 2>/dev/null; fi
  for p in "${component_pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# A small long-context workload that fits the tiny-test engine (4,096-token context).
small=(--param documents=4 --param prefix_tokens=400 --param preamble_tokens=40
       --param output_tokens_median=8 --param output_tokens_max=16)

# --help documents the options and exits 0.
check "help" bash -c "'$bin' bench --help | grep -q -- '--concurrency' && '$bin' bench --help | grep -q -- '--json'"
check "help: tenant classes" bash -c "'$bin' bench --help | grep -q -- '--tenants'"
check "listed in the main help" bash -c "'$bin' --help | grep -q bench"
check "help: api and components" bash -c "'$bin' bench --help | grep -q -- '--api' && '$bin' bench --help | grep -q -- '--inference-component' && '$bin' engine --help | grep -q -- '--inference-component'"

# Usage errors exit 2, before sending anything (the URL points nowhere on purpose).
usage() {  # usage NAME ARGS...: bench ARGS exits 2 with a message on stderr
  local name=$1; shift
  local url=(--url http://127.0.0.1:9)
  case " $* " in *" --url "*) url=() ;; esac
  "$bin" bench "${url[@]}" --quiet "$@" >/dev/null 2>"$tmp/err"; local rc=$?
  check "usage: $name" bash -c "test $rc = 2 && test -s '$tmp/err'"
}
usage "concurrency and rate" --concurrency 4 --rate 10
usage "bad tenant class" --tenants interactive:1
usage "tenant priority out of range" --tenants interactive:20:1
usage "workload and trace" --workload rag --trace "$tmp/none.jsonl"
usage "unknown workload" --workload nope
usage "bad param" --param documents
usage "unknown param" --param no_such_param=1
usage "malformed number" --concurrency many
usage "zero concurrency" --concurrency 0
usage "no stop condition" --requests 0
usage "https" --url https://127.0.0.1:8443 --model m
usage "bad time scale" --time-scale 0
usage "replay without trace" --replay
usage "mooncake without a file" --workload mooncake
usage "missing trace file" --trace "$tmp/none.jsonl"
usage "stream fraction above 1" --stream-fraction 1.5
usage "negative abort fraction" --abort-fraction=-0.1
usage "no-stream and stream fraction" --no-stream --stream-fraction 0.5
usage "unknown api" --api openai
usage "bad component name" --inference-component ic_a
usage "component given twice" --inference-component ic-a --inference-component ic-a

# Nothing listening: the run completes, every request fails to connect: exit 1.
"$bin" bench --url http://127.0.0.1:9 --model m --requests 3 --quiet >"$tmp/out" 2>&1; rc=$?
check "unreachable exit code" test $rc = 1
check "unreachable reported" grep -q "connect" "$tmp/out"

logged_port() {  # logged_port LOG PREFIX: the port logged after PREFIX, waiting up to 5 s
  local p=
  for _ in $(seq 1 100); do
    p=$(grep -o "$2 127.0.0.1:[0-9]*" "$1" 2>/dev/null | grep -o '[0-9]*$')
    [ -n "$p" ] && break
    sleep 0.05
  done
  echo "$p"
}
port_of() { logged_port "$1" 'engine emulator on'; }             # an engine's port
gateway_port_of() { logged_port "$1" 'prefix-router listening on'; }  # a gateway's port

# The engine emulator on an ephemeral port, reporting cached tokens (as vLLM does with
# --enable-prompt-tokens-details) so that the runs below have a hit rate.
"$bin" engine --listen 127.0.0.1:0 --profile tiny-test --time-scale 0.01 --enable-prompt-tokens-details \
  >"$tmp/engine.log" 2>&1 &
engine_pid=$!
port=$(port_of "$tmp/engine.log")
check "engine started" test -n "$port"
url=http://127.0.0.1:${port:-9}

# A short closed-loop run writes valid JSON and CSV with the documented fields; the model comes
# from the engine's /v1/models; the summary names TTFT, hit rate and throughput.
"$bin" bench --url "$url" "${small[@]}" --concurrency 4 --requests 24 --warmup 4 --time-scale 0.01 \
  --strategy direct --json "$tmp/run.json" --csv "$tmp/run.csv" --quiet >"$tmp/out" 2>"$tmp/err"; rc=$?
check "closed run exit 0" test $rc = 0
check "summary" bash -c "grep -q 'TTFT' '$tmp/out' && grep -q 'hit rate' '$tmp/out' && grep -q 'throughput' '$tmp/out' && grep -q 'engine TTFT' '$tmp/out'"
check "quiet stderr" test ! -s "$tmp/err"
check "json fields" python3 -c "
import json, sys
runs = json.load(open('$tmp/run.json'))
assert isinstance(runs, list) and len(runs) == 1, runs
r = runs[0]
assert r['source'] == 'bench' and r['ttft_kind'] == 'client', r
assert r['workload'] == 'long-context' and r['strategy'] == 'direct' and r['seed'] == 1, r
assert r['requests'] == 24 and r['errors'] == 0, (r['requests'], r['errors'])
s = r['settings']
for k, v in (('concurrency', 4), ('requests', 24), ('time_scale', 0.01), ('warmup', 4), ('duration_s', 0)):
    assert s[k] == v, (k, s)
assert 'rate_rps' not in s
assert 0 < r['ttft_p50_s'] <= r['ttft_p90_s'] <= r['ttft_p99_s'], r
assert r['e2e_p50_s'] >= r['ttft_p50_s'] > 0
assert r['engine_ttft_p50_s'] > 0 and r['itl_p50_s'] > 0
assert 0 < r['hit_rate'] <= 1, r['hit_rate']   # 4 documents, 28 requests: repeats hit
assert r['throughput_rps'] > 0 and r['output_tokens_per_s'] > 0
assert r['share'] == [] and r['instances'] == 0
assert len(r['ttft_quantiles']) == 101
"
check "csv" bash -c "test \$(wc -l < '$tmp/run.csv') = 2 && head -1 '$tmp/run.csv' | grep -q 'settings.concurrency'"

# An open-loop run by duration (model time) with --no-stream and explicit model.
"$bin" bench --url "$url" "${small[@]}" --rate 10 --duration 8 --time-scale 0.01 --no-stream --model llama \
  --json "$tmp/open.json" --quiet >"$tmp/out" 2>&1; rc=$?
check "open run exit 0" test $rc = 0
check "open json" python3 -c "
import json
r = json.load(open('$tmp/open.json'))[0]
assert r['settings']['rate_rps'] == 10 and r['settings']['duration_s'] == 8, r['settings']
assert 'concurrency' not in r['settings']
# About 80 arrive (Poisson); how many of their sessions' later turns fit before the deadline
# depends on how fast replies come back in wall time (an ASan build on a busy machine is slow),
# so only bounds that hold whatever the speed: something was sent, never more than could arrive.
assert 1 <= r['requests'] <= 130, r['requests']
assert r['errors'] == 0, r['errors']
assert abs(r['ttft_p50_s'] - r['e2e_p50_s']) < 1e-9   # not streaming: TTFT is the whole response
"

# Mixed traffic: half streaming, a fifth abandoned by the client. Aborted requests are counted
# apart (not errors), every request sent is either counted or aborted, and the requests cut
# while sending are fixed by the seed (the same in two runs).
mixed=(bench --url "$url" "${small[@]}" --concurrency 4 --requests 150 --time-scale 0.01
       --stream-fraction 0.5 --abort-fraction 0.2 --seed 4 --quiet)
"$bin" "${mixed[@]}" --json "$tmp/mixed1.json" >"$tmp/out" 2>&1; rc1=$?
"$bin" "${mixed[@]}" --json "$tmp/mixed2.json" >/dev/null 2>&1; rc2=$?
check "mixed exit 0" bash -c "test $rc1 = 0 && test $rc2 = 0"
check "mixed summary" grep -Eq '^  aborted +[0-9]+ abandoned by the client' "$tmp/out"
check "mixed json" python3 -c "
import json
a = json.load(open('$tmp/mixed1.json'))[0]
b = json.load(open('$tmp/mixed2.json'))[0]
for r in (a, b):
    s, x = r['settings'], r['extra']
    assert s['stream_fraction'] == 0.5 and s['abort_fraction'] == 0.2, s
    assert r['errors'] == 0, r['errors']
    assert r['requests'] + x['aborted'] == 150, (r['requests'], x['aborted'])
    assert x['aborted'] == x['aborted_sending'] + x['aborted_waiting'] + x['aborted_receiving'], x
    assert 10 <= x['aborted'] <= 60, x['aborted']   # about 30, some planned aborts finish first
    assert x['aborted_sending'] > 0, x
assert a['extra']['aborted_sending'] == b['extra']['aborted_sending'], (a['extra'], b['extra'])
"
# Without the new options nothing new is written (the default behaviour is unchanged).
check "no mixed keys by default" python3 -c "
import json
r = json.load(open('$tmp/run.json'))[0]
assert 'stream_fraction' not in r['settings'] and 'abort_fraction' not in r['settings'], r['settings']
assert 'aborted' not in r['extra'], r['extra']
"

# Against an engine at its default (no cached-token counts, as a default vLLM), the hit rate is
# n/a in the summary and null in the JSON, not 0%; streamed or not; the rest is measured.
"$bin" engine --listen 127.0.0.1:0 --profile tiny-test --time-scale 0.01 >"$tmp/plain.log" 2>&1 &
plain_pid=$!
plain=$(port_of "$tmp/plain.log")
check "default engine started" test -n "$plain"
for mode in stream no-stream; do
  extra=(); [ $mode = no-stream ] && extra=(--no-stream)
  "$bin" bench --url "http://127.0.0.1:${plain:-9}" "${small[@]}" --concurrency 2 --requests 12 --time-scale 0.01 \
    "${extra[@]}" --json "$tmp/plain-$mode.json" --quiet >"$tmp/out" 2>&1; rc=$?
  check "no counts, $mode: exit 0" test $rc = 0
  check "no counts, $mode: summary says n/a" grep -Eq '^  hit rate +n/a' "$tmp/out"
  check "no counts, $mode: json null" python3 -c "
import json
r = json.load(open('$tmp/plain-$mode.json'))[0]
assert r['errors'] == 0 and r['requests'] == 12, r
assert r['hit_rate'] is None, r['hit_rate']
assert r['ttft_p50_s'] > 0 and r['throughput_rps'] > 0, r
"
done
# The same engine still counts its prefix cache hits in /metrics (12 requests over 4 documents).
check "no counts: metrics still count hits" python3 -c "
import re, urllib.request
text = urllib.request.urlopen('http://127.0.0.1:${plain:-9}/metrics').read().decode()
m = re.search(r'^vllm:prefix_cache_hits_total\{[^}]*\} ([0-9.e+]+)$', text, re.M)
assert m and float(m.group(1)) > 0, text
"

# --progress prints progress lines on stderr even when it is not a terminal (a 1.6 s wall run).
"$bin" bench --url "$url" "${small[@]}" --time-scale 0.01 --rate 0.2 --duration 160 --progress >"$tmp/out" 2>"$tmp/err"; rc=$?
check "progress exit 0" test $rc = 0
check "progress lines" grep -Eq '^ +[0-9]+ done, [0-9]+ failed, [0-9]+ in flight, [0-9.]+ rps$' "$tmp/err"

# The committed Mooncake slice replayed open loop at its recorded times (its first 10 s: 38
# requests): prompts beyond tiny-test's 4,096-token context are answered 400 and counted as
# errors, never waited for; the others are served; the run ends with the replayed window.
slice="$root/data/mooncake/conversation_trace_600s.jsonl"
"$bin" bench --url "$url" --workload mooncake --param file="$slice" --param until_s=10 --replay \
  --time-scale 0.01 --requests 100 --json "$tmp/mooncake.json" --quiet >"$tmp/out" 2>&1; rc=$?
check "mooncake replay exit 0" test $rc = 0
check "mooncake replay json" python3 -c "
import json
r = json.load(open('$tmp/mooncake.json'))[0]
assert r['workload'] == 'mooncake' and r['settings']['trace_speed'] == 1, r
assert 'rate_rps' not in r['settings'] and 'concurrency' not in r['settings'], r['settings']
rows = [json.loads(l) for l in open('$slice')]
rows = [x for x in rows if x['timestamp'] < 10000]
too_long = sum(1 for x in rows if x['input_length'] + 17 + x['output_length'] > 4096)
assert r['requests'] == len(rows) == 38 and r['errors'] == too_long, (r['requests'], r['errors'], too_long)
"

# Inference components end to end: `serve` in front of two engines serving one component each
# (the gateway discovers them from /v1/models). Over the native API (the component header picks
# the pool) and the chat API (the component is the model), every request of a component lands
# on its engine: the gateway's per-instance, per-model counts match bench's per-component ones.
declare -A component_port
for c in a b; do
  "$bin" engine --listen 127.0.0.1:0 --profile tiny-test --time-scale 0.01 --enable-prompt-tokens-details \
    --inference-component "ic-$c" >"$tmp/engine-$c.log" 2>&1 &
  component_pids+=($!)
  component_port[$c]=$(port_of "$tmp/engine-$c.log")
  check "component engine $c started" test -n "${component_port[$c]}"
done
"$bin" serve --listen 127.0.0.1:0 --instance "e-a=http://127.0.0.1:${component_port[a]:-9}" \
  --instance "e-b=http://127.0.0.1:${component_port[b]:-9}" --strategy round-robin >"$tmp/serve.log" 2>&1 &
component_pids+=($!)
gw=$(gateway_port_of "$tmp/serve.log")
check "component gateway started" test -n "$gw"
for api in native chat; do
  before=$(curl -s "http://127.0.0.1:${gw:-9}/metrics")
  "$bin" bench --url "http://127.0.0.1:${gw:-9}" "${small[@]}" --api $api --inference-component ic-a \
    --inference-component ic-b --concurrency 2 --requests 30 --time-scale 0.01 --json "$tmp/ic-$api.json" \
    >"$tmp/out" 2>"$tmp/err"; rc=$?
  check "components, $api: exit 0" test $rc = 0
  check "components, $api: summary" grep -Eq '^  components +ic-a [0-9]+ \(0 errors\), ic-b [0-9]+ \(0 errors\)$' "$tmp/out"
  check "components, $api: no model list asked" bash -c "! grep -q 'GET /v1/models' '$tmp/err'"
  curl -s "http://127.0.0.1:${gw:-9}/metrics" >"$tmp/ic-$api.prom"
  echo "$before" >"$tmp/ic-$api-before.prom"
  check "components, $api: each on its engine" python3 - "$tmp" "$api" <<'PY'
import json, re, sys
d, api = sys.argv[1], sys.argv[2]
r = json.load(open(f'{d}/ic-{api}.json'))[0]
assert r['errors'] == 0 and r['requests'] == 30, (r['errors'], r['requests'])
assert r['settings']['inference_components'] == 2, r['settings']
assert r['settings'].get('native_api') == (1 if api == 'native' else None), r['settings']
x = r['extra']
assert x['component_requests.ic-a'] + x['component_requests.ic-b'] == 30, x
assert x['component_requests.ic-a'] > 0 and x['component_requests.ic-b'] > 0, x
assert x['component_errors.ic-a'] == 0 and x['component_errors.ic-b'] == 0, x
def routed(path):
    out = {}
    for m in re.finditer(r'^prefix_router_requests_total\{([^}]*)\} (\S+)$', open(path).read(), re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        key = (labels['instance'], labels['model'])
        out[key] = out.get(key, 0) + float(m.group(2))
    return out
after, before = routed(f'{d}/ic-{api}.prom'), routed(f'{d}/ic-{api}-before.prom')
delta = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
want = {('e-a', 'ic-a'): x['component_requests.ic-a'], ('e-b', 'ic-b'): x['component_requests.ic-b']}
assert delta == want, (delta, want)
PY
done

# Tenant classes through a gateway with flow control (docs/flow-control.md): one slot, a queue;
# 6 users of two classes send 36 requests: every request waits its turn and completes (none is
# refused), the gateway saw both priorities, and bench prints one line per class.
"$bin" serve --listen 127.0.0.1:0 --instance "e=$url" --max-in-flight 1 --max-queue 50 >"$tmp/serve-flow.log" 2>&1 &
component_pids+=($!)
gw=$(gateway_port_of "$tmp/serve-flow.log")
check "flow-control gateway started" test -n "$gw"
"$bin" bench --url "http://127.0.0.1:${gw:-9}" "${small[@]}" --tenants interactive:1:0.3,batch:0:0.7 \
  --concurrency 6 --requests 36 --time-scale 0.01 --json "$tmp/flow.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "tenants: exit 0" test $rc = 0
check "tenants: a line per class" bash -c "grep -q 'tenant interactive (priority 1): [0-9]* requests, 0 refused' '$tmp/out' && grep -q 'tenant batch (priority 0): [0-9]* requests, 0 refused' '$tmp/out'"
curl -s "http://127.0.0.1:${gw:-9}/metrics" >"$tmp/flow.prom"
check "tenants: every request through the queue's gateway, both priorities waited" python3 - "$tmp" <<'PY'
import json, re, sys
d = sys.argv[1]
r = json.load(open(f'{d}/flow.json'))[0]
x = r['extra']
assert r['errors'] == 0 and r['requests'] == 36, (r['errors'], r['requests'])
assert x['tenant.interactive.requests'] + x['tenant.batch.requests'] == 36, x
assert x['tenant.interactive.requests'] > 0 and x['tenant.batch.requests'] > 0, x
prom = open(f'{d}/flow.prom').read()
waited = {m.group(1) for m in re.finditer(r'^prefix_router_queue_wait_seconds_count\{[^}]*priority="(-?\d+)"[^}]*\} (\d+)', prom, re.M)
          if int(m.group(2)) > 0}
assert waited >= {'0', '1'}, waited
PY

echo "$passes passed, $fails failed"
test $fails = 0
