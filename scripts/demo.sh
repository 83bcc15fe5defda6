#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs packages, builds the release binary, then
# runs `prefix-router demo`: 7 engine emulators and the gateway on loopback, the long-context and
# sharegpt-like workloads and the committed Mooncake trace slice (data/mooncake/, found relative
# to the repository root, where this script runs it) through the gateway for each strategy, the
# same runs simulated, the comparison table on the terminal and demo-results/{results.json,report.html}.
# Extra arguments go to `prefix-router demo` (e.g. --seed 2, --scale 0.25 for a quick look).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
exec build/release/src/prefix-router demo --out demo-results "$@"
