#!/usr/bin/env bash
# The managed service's 16 configurations (issue 25): {single-model, inference-component
# endpoint} x {native Invoke API, OpenAI chat} x {long-context, sharegpt-like} x {random,
# prefix-aware}, live on loopback with 7 engine emulators and the gateway under --compat
# sagemaker, one table row each, 0 errors required (exit 1 otherwise). About 25 minutes on
# 2 cores; out of CI. Builds the release binary first (scripts/setup.sh must have run once).
# Extra arguments go to scripts/sagemaker_matrix.py: --seconds S (wall seconds of traffic per
# run, default 60), --out DIR (default sagemaker-matrix-results), --only N (the first N runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release
exec python3 scripts/sagemaker_matrix.py --binary build/release/src/prefix-router "$@"
