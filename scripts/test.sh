#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs packages, builds the sanitizer
# test tree and the release tree; smoke-runs each benchmark briefly (speed is measured by
# scripts/bench-decision.sh, not here) and builds, unpacks and runs the release tree's .deb;
# runs every unit and integration test under ASan+UBSan; then builds the fuzz targets and runs
# each for 20 s (scripts/fuzz.sh; longer runs by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh test
bash scripts/build.sh release
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "== benchmarks (smoke run) and the Debian package, release build"
ctest --test-dir build/release -L 'benchmark|package' --output-on-failure
echo "== tests (ASan + UBSan build)"
# Label `slow` (the endpoint picker's 1,000 streams) stays out of CI: ctest -L slow runs it.
ctest --test-dir build/test --output-on-failure -j "$(nproc)" -LE slow
echo "== fuzz targets (smoke run, clang-14 build)"
bash scripts/fuzz.sh 20
