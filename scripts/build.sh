#!/usr/bin/env bash
# Configures and builds one of the two build trees:
#   scripts/build.sh release   build/release: optimised binary and benchmarks
#   scripts/build.sh test      build/test: Debug with AddressSanitizer + UndefinedBehaviorSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
jobs=${JOBS:-$(nproc)}
case "$kind" in
  release)
    cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DPR_BUILD_TESTS=OFF >/dev/null ;;
  test)
    cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPR_SANITIZE=ON \
      -DPR_BUILD_BENCHMARKS=OFF >/dev/null ;;
  *) echo "usage: scripts/build.sh release|test" >&2; exit 2 ;;
esac
ninja -C "build/$kind" -j "$jobs"
