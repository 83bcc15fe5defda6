#!/usr/bin/env bash
# Behaviour of the binary's command line, run by CTest with the binary's path as $1 and the
# repository root as $2.
set -uo pipefail
bin=$1
root=${2:-.}
fails=0; passes=0
check() {  # check NAME COMMAND...: passes when the command succeeds
  local name=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
body='{"model":"llama","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hi"}]}'

# --help names every subcommand and exits 0; --version prints the version.
check "help" bash -c "'$bin' --help | grep -q route"
check "version" bash -c "'$bin' --version | grep -Eq '^prefix-router [0-9]+\.[0-9]+\.[0-9]+$'"
check "no subcommand is an error" bash -c "! '$bin' >/dev/null 2>&1"

# Two processes with the same membership, listed in any order, agree on the preference order.
a=$(echo "$body" | "$bin" route --instance a --instance b --instance c --instance d - | grep -o '"preference":[^]]*]')
b=$(echo "$body" | "$bin" route --instance d --instance c --instance a --instance b - | grep -o '"preference":[^]]*]')
check "cross-process order" test -n "$a" -a "$a" = "$b"

# A routing group changes the key; the same group gives the same key.
k1=$(echo "$body" | "$bin" route --instances 3 --api native --group t1 - | grep -o '"key":"[0-9a-f]*"')
k2=$(echo "$body" | "$bin" route --instances 3 --api native --group t2 - | grep -o '"key":"[0-9a-f]*"')
k3=$(echo "$body" | "$bin" route --instances 3 --api native --group t1 - | grep -o '"key":"[0-9a-f]*"')
check "group isolation" test "$k1" != "$k2" -a "$k1" = "$k3"

# --show-text of a native body whose keyed prefix ends inside a character (1024 bytes: 1023
# ASCII bytes, then a 3-byte character): the line is valid JSON, the text cut before the character.
native=$(python3 -c 'import sys; sys.stdout.buffer.write(b"x" * 1023 + "\u3042".encode() * 10)')
shown=$(printf '%s' "$native" | "$bin" route --instances 3 --api native --strategy prefix-aware --prefix-length 1024 --show-text -)
check "show-text is valid JSON" bash -c "printf '%s' '$shown' | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"keyed_text\"] == \"x\" * 1023, d[\"keyed_text\"][-5:]'"

# Malformed JSON: exit 1 and the gateway's 400 error body.
out=$(echo '{"model":' | "$bin" route --instances 3 -); rc=$?
check "malformed json exit code" test $rc = 1
check "malformed json body" bash -c "echo '$out' | grep -q '\"http_status\":400' && echo '$out' | grep -q invalid_request_error"

# Out-of-range settings are refused with the field and the range named.
err=$(echo "$body" | "$bin" route --instances 3 --prefix-length 100 - 2>&1 >/dev/null); rc=$?
check "prefix length range" bash -c "test $rc = 2 && echo '$err' | grep -q 'prefix_length: 100 is outside the allowed range 1024..65536'"
err=$(echo "$body" | "$bin" route --instances 3 --concurrency-threshold 2000 - 2>&1 >/dev/null); rc=$?
check "threshold range" bash -c "test $rc = 2 && echo '$err' | grep -q 'concurrency_threshold: 2000 is outside the allowed range 1..1024'"
err=$(echo "$body" | "$bin" route --instances 3 --strategy kv-aware - 2>&1 >/dev/null); rc=$?
check "route refuses kv-aware" bash -c "test $rc = 2 && echo '$err' | grep -q 'one request alone has nothing to match'"
# The default strategy (cache-aware) decides on a cold index: the first preferred instance, the
# decision least-outstanding (nothing cached anywhere), the whole text's blocks (1,156
# characters keyed: 4 whole blocks of 256).
long_system=$(printf 'Answer from the attached ledger only. %.0s' $(seq 1 30))
long_body='{"model":"llama","messages":[{"role":"system","content":"'"$long_system"'"},{"role":"user","content":"hi"}]}'
out=$(echo "$long_body" | "$bin" route --instances 5 -)
first=$(echo "$out" | grep -o '"preference":\["[^"]*"' | sed 's/.*\["//; s/"$//')
check "route defaults to cache-aware" bash -c "echo '$out' | grep -q '\"strategy\":\"cache-aware\"' && echo '$out' | grep -q '\"decision\":\"least-outstanding\"' && echo '$out' | grep -q '\"blocks\":4,'"
check "cache-aware cold pick is the first preferred" bash -c "test -n '$first' && echo '$out' | grep -q '\"instance\":\"$first\"'"
err=$(echo "$body" | "$bin" route --instances 3 --balance-factor 0.5 - 2>&1 >/dev/null); rc=$?
check "balance factor range" bash -c "test $rc = 2 && echo '$err' | grep -q 'balance_factor: 0.5'"
check "balance factor off" bash -c "echo '$body' | '$bin' route --instances 3 --strategy prefix-aware --balance-factor 0 - | grep -q '\"decision\":\"affinity\"'"
err=$(echo "$body" | "$bin" route --instances 3 --api native --group '' - 2>&1); rc=$?
check "empty routing header" bash -c "test $rc = 1 || test $rc = 2"

# serve: the example configuration validates; an invalid one is refused naming the field.
check "example config" bash -c "'$bin' serve --check-config --config '$root/examples/router.yaml' | grep -q 'configuration OK'"
tmp=$(mktemp)
printf 'instances:\n  - url: http://127.0.0.1:1\nrouting:\n  prefix_length: 10\n' > "$tmp"
err=$("$bin" serve --check-config --config "$tmp" 2>&1); rc=$?
check "invalid config refused" bash -c "test $rc = 2 && echo '$err' | grep -q 'routing.prefix_length: 10 is outside the allowed range 1024..65536'"
printf 'instances:\n  - url: http://127.0.0.1:1\ntimeouts:\n  conect: 1\n' > "$tmp"
err=$("$bin" serve --check-config --config "$tmp" 2>&1); rc=$?
check "unknown field refused" bash -c "test $rc = 2 && echo '$err' | grep -q 'timeouts.conect'"
# The managed service's RoutingConfig block: its rules and a setting under both names exit 2
# naming the field; the block alone is valid.
printf 'instances:\n  - url: http://127.0.0.1:1\nRoutingConfig:\n  RoutingStrategy: PREFIX_AWARE\n  PrefixAwareRoutingConfig: {PrefixLength: 2048}\n' > "$tmp"
err=$("$bin" serve --check-config --config "$tmp" 2>&1); rc=$?
check "RoutingConfig missing field refused" bash -c "test $rc = 2 && echo '$err' | grep -q 'RoutingConfig.PrefixAwareRoutingConfig.ConcurrencyThreshold: required'"
printf 'instances:\n  - url: http://127.0.0.1:1\nRoutingConfig: {RoutingStrategy: RANDOM}\nrouting: {routing_strategy: random}\n' > "$tmp"
err=$("$bin" serve --check-config --config "$tmp" 2>&1); rc=$?
check "RoutingConfig mixed with our names refused" bash -c "test $rc = 2 && echo '$err' | grep -q 'RoutingConfig.RoutingStrategy and routing.routing_strategy'"
printf 'instances:\n  - url: http://127.0.0.1:1\nRoutingConfig:\n  RoutingStrategy: PREFIX_AWARE\n  PrefixAwareRoutingConfig: {PrefixLength: 2048, ConcurrencyThreshold: 8}\n' > "$tmp"
check "RoutingConfig alone accepted" bash -c "'$bin' serve --check-config --config '$tmp' --compat sagemaker | grep -q 'default strategy prefix-aware'"
rm -f "$tmp"
err=$("$bin" serve --check-config 2>&1); rc=$?
check "no instance refused" bash -c "test $rc = 2 && echo '$err' | grep -q 'instance'"
check "short form" bash -c "'$bin' serve --check-config --listen 127.0.0.1:0 --instance http://127.0.0.1:8001 --instance b=http://127.0.0.1:8002 --strategy prefix-aware --prefix-length 1024 --concurrency-threshold 8 | grep -q '2 instances'"
check "serve help documents flags" bash -c "'$bin' serve --help | grep -q -- '--concurrency-threshold'"
# Every strategy is named in serve's and route's help (both read core's one list).
for s in random least-outstanding-requests round-robin prefix-aware cache-aware kv-aware dynamo-kv; do
  check "serve help names $s" bash -c "'$bin' serve --help | grep -- '--strategy' | grep -q -- ' $s'"
  check "route help names $s" bash -c "'$bin' route --help | grep -- '--strategy' | grep -q -- ' $s'"
done
check "serve help documents balance factor" bash -c "'$bin' serve --help | grep -q -- '--balance-factor'"
err=$("$bin" serve --check-config --instance http://127.0.0.1:8001 --balance-factor 101 2>&1); rc=$?
check "balance factor flag range" bash -c "test $rc = 2 && echo '$err' | grep -q 'routing.balance_factor: 101 is outside the allowed range 1..100'"
err=$("$bin" serve --check-config --instance http://127.0.0.1:8001 --strategy kv-aware 2>&1 >/dev/null); rc=$?
check "kv-aware without events: valid, with a warning" bash -c "test $rc = 0 && echo '$err' | grep -q 'warning: routing.routing_strategy: kv-aware learns from the engines'"
err=$("$bin" serve --check-config --instance http://user:s3cret@127.0.0.1:8001 2>&1); rc=$?
check "credentials in a url: refused, redacted" bash -c "test $rc = 2 && echo '$err' | grep -q '\*\*\*@127.0.0.1' && ! echo '$err' | grep -q s3cret"
clash=$(mktemp)
printf 'listen: 127.0.0.1:8080\nadmin: {listen: 127.0.0.1:8080}\ninstances:\n  - url: http://127.0.0.1:1\n' > "$clash"
err=$("$bin" serve --check-config "$clash" 2>&1); rc=$?
rm -f "$clash"
check "admin listener on the client listener's address refused" bash -c "test $rc = 2 && echo '$err' | grep -q 'a port of its own'"

# serve runs, answers /health and exits 0 on SIGTERM.
# Wait for its "listening" log line (signal handlers are installed by then); a fixed sleep lost
# the race under ASan on a loaded machine.
log=$(mktemp)
"$bin" serve --listen 127.0.0.1:0 --instance http://127.0.0.1:9 --health-interval 0 >"$log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -qi "listening" "$log" && break; sleep 0.1; done
sleep 0.2
kill -TERM $pid; wait $pid; rc=$?
rm -f "$log"
check "SIGTERM exits 0" test $rc = 0

# The engine's KV event flags: documented, and bad values refused naming the flag.
check "engine help documents kv events" bash -c "'$bin' engine --help | grep -q -- '--kv-events-replay-endpoint'"
check "engine help documents prompt tokens details" bash -c "'$bin' engine --help | grep -q -- '--enable-prompt-tokens-details'"
err=$("$bin" engine --listen 127.0.0.1:0 --kv-events-endpoint 'tcp://127.0.0.1:*' --kv-events-encoding json 2>&1 >/dev/null); rc=$?
check "kv events encoding refused" bash -c "test $rc = 2 && echo '$err' | grep -q -- '--kv-events-encoding'"
err=$("$bin" engine --listen 127.0.0.1:0 --kv-events-endpoint 'bogus://x' 2>&1 >/dev/null); rc=$?
check "kv events endpoint refused" bash -c "test $rc = 2 && echo '$err' | grep -q -- '--kv-events-endpoint'"
err=$("$bin" engine --listen 127.0.0.1:0 --kv-events-replay-endpoint 'tcp://127.0.0.1:*' 2>&1 >/dev/null); rc=$?
check "kv events replay needs endpoint" bash -c "test $rc = 2 && echo '$err' | grep -q -- '--kv-events-replay-endpoint'"

echo "$passes passed, $fails failed"
test $fails = 0
