#!/usr/bin/env bash
# Runs the browser test of the admin listener's status page (status.test.mjs): playwright-core
# driving the system's Chromium (Debian package chromium; no browser is downloaded).
# Usage: tests/status-page/run.sh [PATH/TO/prefix-router]
#   (default: $PREFIX_ROUTER_BIN, else build/release, else build/test)
# Installs the pinned playwright-core from package-lock.json (npm ci) the first time, when
# node_modules is missing; later runs work offline. Exits with node --test's status.
set -euo pipefail
if [ $# -ge 1 ]; then
  [ -x "$1" ] || { echo "status-page: $1 is not an executable" >&2; exit 1; }
  PREFIX_ROUTER_BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  export PREFIX_ROUTER_BIN
fi
cd "$(dirname "$0")"
for tool in node npm "${CHROMIUM_BIN:-/usr/bin/chromium}"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "status-page: $tool not found: run scripts/setup.sh" >&2; exit 1; }
done
if [ ! -d node_modules/playwright-core ]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi
exec node --test --test-reporter=spec --test-concurrency=1 status.test.mjs
