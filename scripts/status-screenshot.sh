#!/usr/bin/env bash
# Makes docs/status.png, the screenshot of the admin listener's live status page in docs/operating.md:
# a small fleet of engine emulators behind `prefix-router serve`, about 45 s of traffic (enough
# to fill a few 10 s buckets of the charts), then Chromium (Debian's, driven by playwright-core)
# captures the page at 1280 px. See tests/status-page/screenshot.mjs for the scenario.
# Usage: scripts/status-screenshot.sh [OUT.png]     (default docs/status.png)
#   binary: $PREFIX_ROUTER_BIN, else build/release/src/prefix-router (scripts/build.sh release)
#   TRAFFIC_SECONDS=45 to change the length of the traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-docs/status.png}")
for tool in node npm "${CHROMIUM_BIN:-/usr/bin/chromium}"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "status-screenshot: $tool not found: run scripts/setup.sh" >&2; exit 1; }
done
if [ ! -d tests/status-page/node_modules/playwright-core ]; then
  (cd tests/status-page && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
node tests/status-page/screenshot.mjs "$out"
