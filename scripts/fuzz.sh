#!/usr/bin/env bash
# Builds the libFuzzer targets (build/fuzz, clang-14, ASan + UBSan) and runs each one for
# SECONDS_PER_TARGET seconds over a copy of its committed corpus (fuzz/corpus/<target>/), so the
# committed corpus never grows. Prints per target the executions and the crashes; each crashing
# input is saved under build/fuzz/crashes/<target>/ and the fuzzer's output under
# build/fuzz/logs/. Exits non-zero on any crash (also on a timeout, leak or out-of-memory
# finding) or when a target fails to run. docs/fuzzing.md has the rest.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]    (default 300)
#   FUZZ_TARGETS="api_request trace"  run a subset (default: every target)
#   JOBS=N                            build jobs (default: nproc)
# Needs clang-14 and libclang-rt-14-dev (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
jobs=${JOBS:-$(nproc)}
read -r -a targets <<<"${FUZZ_TARGETS:-api_request gateway_config trace kv_event_decoder}"
build=build/fuzz

# Input size caps. api_request reaches bodies up to 1 MiB through its amplify mode, so its
# inputs themselves stay moderate.
declare -A max_len=([api_request]=65536 [gateway_config]=16384 [trace]=65536 [kv_event_decoder]=65536)

start=$(date +%s)
# -O1 -g without NDEBUG: fast enough to fuzz, asserts stay on, readable stack traces.
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DPR_BUILD_FUZZERS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
ninja -C "$build" -j "$jobs" "${targets[@]/%/_fuzzer}"
echo "fuzz: build took $(( $(date +%s) - start )) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/logs"
failed=0
summary=()
for t in "${targets[@]}"; do
  binary="$build/fuzz/${t}_fuzzer"
  work="$build/work/$t"
  crashes="$build/crashes/$t"
  log="$build/logs/$t.log"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$crashes"
  cp fuzz/corpus/"$t"/* "$work/corpus/"
  marker="$work/started"
  touch "$marker"
  echo "== $t: ${seconds} s over $(ls "$work/corpus" | wc -l) seeds"
  set +e
  "$binary" "$work/corpus" -max_total_time="$seconds" -dict="fuzz/dict/$t.dict" \
    -max_len="${max_len[$t]:-65536}" -timeout=25 -rss_limit_mb=2560 -print_final_stats=1 \
    -artifact_prefix="$crashes/" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  if [ -z "$execs" ]; then  # no final stats: take the last progress line (#N ...)
    execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
  fi
  new=$(find "$crashes" -type f -newer "$marker" | sort)
  n_crashes=$(printf '%s' "$new" | grep -c . || true)
  summary+=("$(printf '%-16s executions %-10s crashes %s' "$t" "${execs:-?}" "$n_crashes")")
  if [ "$rc" != 0 ] || [ "$n_crashes" != 0 ]; then
    failed=1
    echo "fuzz: $t exited with $rc; the end of $log:"
    tail -n 40 "$log"
    [ -n "$new" ] && printf 'fuzz: saved input: %s\n' $new
  fi
done

echo "== fuzz summary (${seconds} s per target)"
printf '%s\n' "${summary[@]}"
exit "$failed"
