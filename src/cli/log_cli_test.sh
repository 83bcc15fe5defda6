#!/usr/bin/env bash
# The logs of `serve` from the outside, run by CTest with the binary's path as $1 and the
# repository root as $2: the access log is off by default and on with --access-log (or
# log.access_log in the file); with --log-format json every line is one JSON object with ts,
# level and msg; an access line names the method, path, status, instance, decision, duration
# and time to first byte; an ejection is logged with its instance; no secret (admin token, a
# client's Authorization header, a query string) ever reaches the log.
set -uo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"
port_of() {  # port_of LOG PATTERN: the port after "PATTERN HOST:" in LOG, waiting for it
  eventually grep -q "$2" "$1" || return 1
  grep -o "$2 [0-9.]*:[0-9]*" "$1" | head -1 | sed 's/.*://'
}
secret=S3cr3t-$RANDOM-token
body='{"model":"llama","messages":[{"role":"user","content":"hello there"}]}'

# One engine emulator as the instance, so that requests succeed end to end.
"$bin" engine --listen 127.0.0.1:0 --profile tiny-test --time-scale 0.01 --model llama >"$dir/engine.log" 2>&1 &
pids+=($!)
engine=$(port_of "$dir/engine.log" "engine emulator on") || { cat "$dir/engine.log"; echo "FAIL: engine start"; exit 1; }

# serve LOG ARGS...: starts the gateway (admin on, with a token from the environment), waits for
# it, sets $port, sends the same four requests and stops it with SIGTERM.
serve() {
  local log=$1; shift
  printf 'listen: 127.0.0.1:0\nhealth: {interval: 0.2, timeout: 0.2, unhealthy_threshold: 1}\n' >"$dir/router.yaml"
  printf 'admin: {listen: 127.0.0.1:0, token_env: PR_TEST_ADMIN_TOKEN}\n' >>"$dir/router.yaml"
  printf 'instances:\n  - {name: engine-1, url: "http://127.0.0.1:%s"}\n' "$engine" >>"$dir/router.yaml"
  printf '  - {name: dead-1, url: "http://127.0.0.1:9", models: [other]}\n' >>"$dir/router.yaml"
  printf '%s\n' "${EXTRA_YAML:-}" >>"$dir/router.yaml"
  PR_TEST_ADMIN_TOKEN=$secret "$bin" serve --config "$dir/router.yaml" "$@" >"$log" 2>&1 &
  local pid=$!
  port=$(port_of "$log" "prefix-router listening on") || { echo "FAIL: serve start"; cat "$log"; return 1; }
  local admin; admin=$(port_of "$log" "admin listening on")
  curl -s -o /dev/null "http://127.0.0.1:$port/health"
  curl -s -o /dev/null -H "Authorization: Bearer sk-$secret" -H 'content-type: application/json' \
       -d "$body" "http://127.0.0.1:$port/v1/chat/completions?api-key=$secret"
  curl -s -o /dev/null -H "Authorization: Bearer wrong-$secret" "http://127.0.0.1:$admin/admin/instances"
  curl -s -o /dev/null -H 'content-type: application/json' -d '{"model":"nope","messages":[{"role":"user","content":"x"}]}' \
       "http://127.0.0.1:$port/v1/chat/completions"
  # dead-1 fails its checks: the ejection is logged.
  eventually grep -q "instance ejected" "$log"
  kill -TERM $pid; wait $pid
}

# Default: text, no access log; the ejection is logged with the instance named.
serve "$dir/default.log"
check "default: no access log" bash -c "! grep -q '] request ' '$dir/default.log'"
check "default: text lines" bash -c "grep -q '\[info\] prefix-router listening on' '$dir/default.log'"
check "default: ejection logged with its instance" grep -q 'instance ejected instance=dead-1' "$dir/default.log"

# --access-log (text): one line per request with its fields.
serve "$dir/access.log" --access-log
check "access log on: /health line" grep -q 'request method=GET path=/health status=200' "$dir/access.log"
check "access log: routed line" bash -c "grep 'path=/v1/chat/completions status=200' '$dir/access.log' | grep 'instance=engine-1' | grep 'decision=' | grep -q 'ttfb_ms='"
check "access log: 404 for an unknown model" grep -q 'path=/v1/chat/completions status=404 model=nope' "$dir/access.log"

# The same from the file, overridden off by the flag.
EXTRA_YAML='log: {access_log: true}' serve "$dir/file.log"
check "log.access_log in the file turns it on" grep -q 'request method=GET path=/health' "$dir/file.log"
EXTRA_YAML='log: {access_log: true}' serve "$dir/off.log" --no-access-log
check "--no-access-log overrides the file" bash -c "! grep -q '] request ' '$dir/off.log'"

# JSON lines: every line parses, with ts, level and msg; access lines carry the fields.
serve "$dir/json.log" --log-format json --access-log
check "json: every line is a JSON object with ts, level, msg" python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1], encoding="utf-8"):
    o = json.loads(line)
    assert isinstance(o, dict) and {"ts", "level", "msg"} <= o.keys(), line
    n += 1
assert n >= 5, n
' "$dir/json.log"
check "json: routed access line" python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
req = [o for o in lines if o["msg"] == "request" and o["path"] == "/v1/chat/completions" and o["status"] == 200]
assert len(req) == 1, lines
o = req[0]
assert o["method"] == "POST" and o["instance"] == "engine-1" and o["model"] == "llama", o
assert o["decision"] in ("affinity", "overflow", "saturated", "random", "least-outstanding"), o
assert o["attempts"] == 1 and 0 <= o["ttfb_ms"] <= o["duration_ms"], o
ej = [o for o in lines if o["msg"] == "instance ejected"]
assert ej and ej[0]["instance"] == "dead-1" and ej[0]["level"] == "warning", lines
' "$dir/json.log"
EXTRA_YAML='log: {format: json}' serve "$dir/json-file.log"
check "log.format in the file" python3 -c '
import json, sys
for line in open(sys.argv[1], encoding="utf-8"): json.loads(line)
' "$dir/json-file.log"

# No secret in any log: not the admin token, not the client's Authorization, not the query.
check "no secret in the logs" bash -c "! grep -r -- '$secret' '$dir'/*.log"

# A bad format is refused with the allowed values named.
err=$("$bin" serve --check-config --instance http://127.0.0.1:1 --log-format xml 2>&1); rc=$?
check "bad --log-format refused" bash -c 'test "$1" != 0 && printf "%s" "$2" | grep -q "text, json"' _ "$rc" "$err"
printf 'instances: [{url: "http://127.0.0.1:1"}]\nlog: {format: yaml}\n' >"$dir/bad.yaml"
err=$("$bin" serve --check-config --config "$dir/bad.yaml" 2>&1); rc=$?
check "bad log.format refused" bash -c 'test "$1" = 2 && printf "%s" "$2" | grep -q "log.format: .yaml. is not one of text, json"' _ "$rc" "$err"

summary
