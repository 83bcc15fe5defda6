#!/usr/bin/env bash
# Client keys and tenant rate limits from the outside (docs/limits.md), run by CTest with the
# binary's path as $1: `serve --check-config` reads the keys (a missing keys file is found before
# start), the API needs a key and /health does not, a key added to the file works after SIGHUP,
# a tenant over its requests per minute gets 429 with Retry-After, and no key is ever logged.
# No instance is running behind the gateway: an admitted request fails upstream (502/503), which
# is enough to tell it from a 401 or a 429.
set -uo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"

key_a=sk-cli-team-a-7f3e1c9b
key_b=sk-cli-team-b-2d8a6e4f
cat > "$dir/router.yaml" <<YAML
listen: 127.0.0.1:0
health: {interval: 0}
log: {access_log: true}
instances: [{url: "http://127.0.0.1:9"}]
clients: {keys_file: $dir/keys}
rate_limits: {requests_per_minute: 2}
YAML

err=$("$bin" serve --check-config --config "$dir/router.yaml" 2>&1); rc=$?
check "missing keys file refused by --check-config" \
  bash -c "test $rc != 0 && echo '$err' | grep -q 'clients.keys_file.*cannot open'"
printf 'team-a %s\n' "$key_a" > "$dir/keys"
check "--check-config passes with the file" bash -c "'$bin' serve --check-config --config '$dir/router.yaml' | grep -q 'configuration OK'"

"$bin" serve --config "$dir/router.yaml" >"$dir/log" 2>&1 &
pid=$!
check "started" eventually grep -q 'prefix-router listening on' "$dir/log"
port=$(grep -o 'prefix-router listening on [0-9.]*:[0-9]*' "$dir/log" | sed 's/.*://')
chat() {  # chat KEY: the status code of a chat request with that key ("" = none)
  local auth=()
  [ -n "$1" ] && auth=(-H "Authorization: Bearer $1")
  curl -s -o "$dir/body" -D "$dir/head" -w '%{http_code}' "${auth[@]}" -H 'Content-Type: application/json' \
    -d '{"model":"m","messages":[{"role":"user","content":"hi"}]}' "http://127.0.0.1:$port/v1/chat/completions"
}

check "no key is 401" test "$(chat '')" = 401
check "401 names invalid_api_key" grep -q '"code":"invalid_api_key"' "$dir/body"
check "/health needs no key" test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" != 401
check "team-b's key is not known yet" test "$(chat "$key_b")" = 401
printf 'team-a %s\nteam-b %s\n' "$key_a" "$key_b" > "$dir/keys"
kill -HUP $pid
check "SIGHUP re-reads the keys" eventually grep -q 'config reloaded (SIGHUP): clients: 2 keys for 2 tenants (was 1 key for 1 tenant)' "$dir/log"
code=$(chat "$key_b")
check "team-b's key works after SIGHUP" test "$code" != 401 -a "$code" != 429
chat "$key_b" > /dev/null
check "third request of the minute is 429" test "$(chat "$key_b")" = 429
check "429 has Retry-After" grep -qi '^retry-after: [0-9]' "$dir/head"
check "429 names rate_limit_exceeded" grep -q '"code":"rate_limit_exceeded"' "$dir/body"
code=$(chat "$key_a")
check "team-a has a bucket of its own" test "$code" != 401 -a "$code" != 429

kill -TERM $pid; wait $pid; pid=
check "access log names the tenant" grep -q 'tenant=team-b' "$dir/log"
check "no key is logged" bash -c "! grep -q -e '$key_a' -e '$key_b' '$dir/log'"

summary
