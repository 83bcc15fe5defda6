#!/usr/bin/env bash
# Behaviour of the binary's command line, run by CTest with the binary's path as $1.
set -uo pipefail
bin=$1
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

# Malformed JSON: exit 1 and the gateway's 400 error body.
out=$(echo '{"model":' | "$bin" route --instances 3 -); rc=$?
check "malformed json exit code" test $rc = 1
check "malformed json body" bash -c "echo '$out' | grep -q '\"http_status\":400' && echo '$out' | grep -q invalid_request_error"

# Out-of-range settings are refused with the field and the range named.
err=$(echo "$body" | "$bin" route --instances 3 --prefix-length 100 - 2>&1 >/dev/null); rc=$?
check "prefix length range" bash -c "test $rc = 2 && echo '$err' | grep -q 'prefix_length: 100 is outside the allowed range 1024..65536'"
err=$(echo "$body" | "$bin" route --instances 3 --concurrency-threshold 2000 - 2>&1 >/dev/null); rc=$?
check "threshold range" bash -c "test $rc = 2 && echo '$err' | grep -q 'concurrency_threshold: 2000 is outside the allowed range 1..1024'"
err=$(echo "$body" | "$bin" route --instances 3 --api native --group '' - 2>&1); rc=$?
check "empty routing header" bash -c "test $rc = 1 || test $rc = 2"

echo "$passes passed, $fails failed"
test $fails = 0
