#!/usr/bin/env bash
# The gateway's token accounting on one run, three ways: `prefix-router bench` through `serve`
# in front of two engine emulators (tiny-test, time-scaled, --enable-prompt-tokens-details),
# half of its requests streamed with include_usage. The gateway's measured hit rate (its
# prefix_router_prompt_tokens_total, cached over all) must be within 2 points of bench's (which
# reads the same responses at the client), and its token counts within 1% of the engines' own
# prefix-cache counters. Every port is ephemeral, read from the processes' logs. Run by CTest
# with the binary's path as $1 and the repository root as $2.
set -uo pipefail
bin=$1
root=${2:-.}
source "$(dirname "$0")/test_lib.sh"

port_of() {  # port_of LOG PATTERN: the port after PATTERN in LOG, waiting up to 10 s
  local p=
  for _ in $(seq 1 200); do
    p=$(grep -o "$2[0-9]*" "$1" 2>/dev/null | head -1 | grep -o '[0-9]*$')
    [ -n "$p" ] && break
    sleep 0.05
  done
  echo "$p"
}

instances=()
for e in 0 1; do
  "$bin" engine --listen 127.0.0.1:0 --profile tiny-test --time-scale 0.01 --enable-prompt-tokens-details \
    >"$dir/engine$e.log" 2>&1 &
  pids+=($!)
  engine_port[$e]=$(port_of "$dir/engine$e.log" 'engine emulator on 127.0.0.1:')
  check "engine $e started" test -n "${engine_port[$e]}"
  instances+=(--instance "http://127.0.0.1:${engine_port[$e]:-9}")
done
"$bin" serve --listen 127.0.0.1:0 "${instances[@]}" --strategy cache-aware >"$dir/serve.log" 2>&1 &
pids+=($!)
gw=$(port_of "$dir/serve.log" 'prefix-router listening on 127.0.0.1:')
check "serve started" test -n "$gw"

# No warm-up: bench must count every request the gateway relays. Four documents of 400 tokens
# (they fit tiny-test's 4,096-token cache) make repeats hit.
"$bin" bench --url "http://127.0.0.1:${gw:-9}" --workload long-context --param documents=4 --param prefix_tokens=400 \
  --param preamble_tokens=40 --param output_tokens_median=8 --param output_tokens_max=16 \
  --concurrency 4 --requests 80 --warmup 0 --stream-fraction 0.5 --time-scale 0.01 --model llama \
  --json "$dir/run.json" --quiet >"$dir/bench.out" 2>&1; rc=$?
check "bench exit 0" test $rc = 0

curl -s "http://127.0.0.1:${gw:-9}/metrics" >"$dir/gateway.prom"
for e in 0 1; do curl -s "http://127.0.0.1:${engine_port[$e]:-9}/metrics" >"$dir/engine$e.prom"; done
check "hit rates agree" python3 - "$dir" <<'EOF'
import json, re, sys
d = sys.argv[1]
def samples(path, name):
    text = open(path).read()
    return [(m.group(1), float(m.group(2)))
            for m in re.finditer(r'^' + re.escape(name) + r'\{([^}]*)\} (\S+)$', text, re.M)]
run = json.load(open(f'{d}/run.json'))[0]
assert run['errors'] == 0 and run['requests'] == 80, (run['errors'], run['requests'])
prompt = samples(f'{d}/gateway.prom', 'prefix_router_prompt_tokens_total')
cached = sum(v for labels, v in prompt if 'cached="true"' in labels)
total = sum(v for _, v in prompt)
with_usage = sum(v for labels, v in samples(f'{d}/gateway.prom', 'prefix_router_usage_responses_total')
                 if 'with_usage="true"' in labels)
assert with_usage == 80, f'{with_usage} responses with usage, 80 sent'
hits = sum(v for e in (0, 1) for _, v in samples(f'{d}/engine{e}.prom', 'vllm:prefix_cache_hits_total'))
queries = sum(v for e in (0, 1) for _, v in samples(f'{d}/engine{e}.prom', 'vllm:prefix_cache_queries_total'))
gateway_rate, bench_rate = cached / total, run['hit_rate']
print(f'hit rate: bench {bench_rate:.4f}, gateway {gateway_rate:.4f}, engines {hits / queries:.4f}; '
      f'prompt tokens: gateway {total:.0f}, engines {queries:.0f}; cached: gateway {cached:.0f}, engines {hits:.0f}')
assert bench_rate > 0.2, bench_rate   # repeats of four documents hit
assert abs(bench_rate - gateway_rate) <= 0.02, (bench_rate, gateway_rate)
assert abs(total - queries) <= 0.01 * queries, (total, queries)
assert abs(cached - hits) <= 0.01 * queries, (cached, hits)
EOF

summary
