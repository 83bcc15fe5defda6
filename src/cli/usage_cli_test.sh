#!/usr/bin/env bash
# Every usage error of serve, engine, simulate, bench and demo (unknown flag, bad value, missing
# or unreadable file) exits 2 with a message on stderr; help exits 0. route and report keep
# their documented codes (route: 1 for an invalid request body; report: 1 for a file that
# cannot be read, 2 for one that is not a results file), and a usage error of theirs exits 2.
# None of these invocations needs a network: each fails before it would listen or connect.
set -uo pipefail
bin=$1
source "$(dirname "$0")/test_lib.sh"

usage_error() {  # usage_error COMMAND...: exits 2 and says something on stderr
  local out rc
  out=$("$bin" "$@" 2>&1 >/dev/null </dev/null); rc=$?
  if [ "$rc" != 2 ] || [ -z "$out" ]; then
    echo "  '$*' exited $rc (want 2): ${out:0:200}"
    return 1
  fi
}
exits() {  # exits CODE COMMAND...
  local want=$1 rc; shift
  "$bin" "$@" >/dev/null 2>&1; rc=$?
  [ "$rc" = "$want" ] || { echo "  '$*' exited $rc (want $want)"; return 1; }
}

echo '{"not": "a results file"}' >"$dir/not-results.json"
printf 'listen: [1, 2\n' >"$dir/broken.yaml"

# No subcommand, an unknown one, help and version.
check "no subcommand" usage_error
check "unknown subcommand" usage_error frobnicate
check "help exits 0" exits 0 --help </dev/null
check "serve --help exits 0" exits 0 serve --help
check "version exits 0" exits 0 --version

# serve (every case stops before listening)
check "serve unknown flag" usage_error serve --bogus
check "serve unknown strategy" usage_error serve --strategy bogus --instance http://127.0.0.1:1
check "serve non-numeric threshold" usage_error serve --concurrency-threshold many --instance http://127.0.0.1:1
check "serve threshold out of range" usage_error serve --concurrency-threshold 0 --instance http://127.0.0.1:1
check "serve bad instance url" usage_error serve --instance notaurl
check "serve port out of range" usage_error serve --listen 127.0.0.1:99999 --instance http://127.0.0.1:1
check "serve missing config file" usage_error serve --config "$dir/missing.yaml"
check "serve broken config file" usage_error serve --config "$dir/broken.yaml"
check "serve --check-config missing file" usage_error serve --check-config --config "$dir/missing.yaml"

# engine
check "engine unknown flag" usage_error engine --bogus
check "engine unknown profile" usage_error engine --profile nosuch
check "engine flag without value" usage_error engine --listen
check "engine bad calibration" usage_error engine --calibration uncached=abc

# simulate
check "simulate unknown flag" usage_error simulate --bogus
check "simulate unknown workload" usage_error simulate --workload nosuch --duration 1
check "simulate unknown strategy" usage_error simulate --strategy nosuch --duration 1
check "simulate non-numeric seed" usage_error simulate --seed x
check "simulate negative rate" usage_error simulate --rate -1 --duration 1
check "simulate unknown parameter" usage_error simulate --param foo=bar --duration 1
check "simulate missing trace file" usage_error simulate --workload trace --param file="$dir/missing.jsonl" --duration 1

# bench (stops before connecting)
check "bench unknown flag" usage_error bench --bogus
check "bench non-numeric rate" usage_error bench --rate abc
check "bench unknown workload" usage_error bench --workload nosuch --url http://127.0.0.1:1
check "bench https url" usage_error bench --url https://127.0.0.1:1 --model m
check "bench missing trace" usage_error bench --trace "$dir/missing.jsonl" --url http://127.0.0.1:1 --model m

# demo
check "demo unknown flag" usage_error demo --bogus
check "demo unknown strategy" usage_error demo --strategy nosuch
check "demo flag without value" usage_error demo --workloads

# route and report: usage errors exit 2, their documented codes stay.
check "route unknown flag" usage_error route --bogus
check "route invalid body exits 1" exits 1 route --instances 3 - <<<'{"model":'
check "report no file" usage_error report
check "report not a results file exits 2" exits 2 report "$dir/not-results.json"
check "report unknown flag" usage_error report --bogus "$dir/not-results.json"

summary
