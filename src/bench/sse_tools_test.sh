#!/usr/bin/env bash
# Smoke test of the stream route's tools (CTest sse_tools_smoke): sse_upstream answers GET with
# {"ok":true} and POST with 256 events, each its own chunk; sse_probe reads them back, unpaced and
# paced, and reports every event.
# Usage: sse_tools_test.sh SSE_UPSTREAM SSE_PROBE
set -euo pipefail
upstream=$1 probe=$2
dir=$(mktemp -d)
"$upstream" --port 0 > "$dir/listen.txt" 2> "$dir/upstream.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do grep -q listening "$dir/listen.txt" && break; sleep 0.1; done
port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$dir/listen.txt")
[ -n "$port" ] || { echo "sse_upstream did not listen"; cat "$dir/upstream.log"; exit 1; }
echo '{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"hi"}]}' > "$dir/body.json"

# Health answer.
[ "$(curl -s --max-time 5 "http://127.0.0.1:$port/health")" = '{"ok":true}' ] || { echo "GET /health"; exit 1; }

# The wire: 256 chunks of one event each, then the zero-length chunk.
curl -s --raw --max-time 5 -H 'Content-Type: application/json' --data-binary "@$dir/body.json" \
  "http://127.0.0.1:$port/v1/chat/completions" > "$dir/raw.txt"
chunks=$(grep -c -E $'^[0-9a-f]+\r$' "$dir/raw.txt")
events=$(grep -c '^data: ' "$dir/raw.txt")
[ "$chunks" = 257 ] && [ "$events" = 256 ] || { echo "raw stream: $chunks chunk lines, $events events"; exit 1; }
tail -c 200 "$dir/raw.txt" | grep -q 'data: \[DONE\]' || { echo "no [DONE]"; exit 1; }

# The probe: three requests on one connection, unpaced and paced 200 us apart.
for gap in 0 200; do
  out=$("$probe" --port "$port" --body "$dir/body.json" --requests 3 --gap-us "$gap")
  echo "$out"
  echo "$out" | grep -q '"requests":3,"events":768,' || { echo "probe (gap $gap): wrong counts"; exit 1; }
done
# Paced: the stream lasts at least 255 gaps.
"$probe" --port "$port" --body "$dir/body.json" --requests 1 --gap-us 200 |
  python3 -c 'import json,sys; r=json.loads(sys.stdin.read().split(" ",1)[1]); assert r["last_event_p50_us"] >= 255*200, r'
echo "sse tools: ok"
