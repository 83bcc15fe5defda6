#!/usr/bin/env bash
# Runs the OpenAI SDK integration tests in one `node --test` call: `prefix-router engine` alone
# (engine.test.mjs) and the README's quick start, gateway and engines, run as written there
# (quickstart.test.mjs).
# Usage: tests/openai-client/run.sh [PATH/TO/prefix-router]
#   (default: $PREFIX_ROUTER_BIN, else build/release, else build/test)
# Installs the pinned SDK from package-lock.json (npm ci) the first time, when node_modules is
# missing; later runs work offline. Exits with node --test's status.
set -euo pipefail
if [ $# -ge 1 ]; then
  [ -x "$1" ] || { echo "openai-client: $1 is not an executable" >&2; exit 1; }
  PREFIX_ROUTER_BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  export PREFIX_ROUTER_BIN
fi
cd "$(dirname "$0")"
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "openai-client: $tool not found: run scripts/setup.sh" >&2; exit 1; }
done
if [ ! -d node_modules/openai ]; then
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi
exec node --test --test-reporter=spec engine.test.mjs quickstart.test.mjs
