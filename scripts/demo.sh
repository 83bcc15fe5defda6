#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs packages, builds the release binary, shows
# one routing decision explained, then measures routing decisions and placement quality and
# prints the tables the README quotes. (This becomes `prefix-router demo`, the end-to-end
# comparison on emulated engines, when the gateway and the engine emulator land.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
bin=build/release/src/prefix-router
echo
echo "== One decision, explained: two tenants with the same system prompt place independently"
for tenant in tenant-a tenant-b; do
  printf '{"model":"llama","prompt_cache_key":"%s","messages":[{"role":"system","content":"You are a support agent for ACME. Policies follow..."},{"role":"user","content":"Where is my order?"}]}' "$tenant" \
    | "$bin" route --instances 7 --strategy prefix-aware -
done
echo
echo "== Routing decision cost and placement quality (scripts/bench-decision.sh)"
bash scripts/bench-decision.sh "$@"
