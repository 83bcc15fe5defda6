#!/usr/bin/env bash
# The operations side of `serve` from the outside, run by CTest with the binary's path as $1 and
# the repository root as $2: SIGHUP reloads the configuration file (an invalid one is refused and
# the running configuration stays), the admin listener asks for its token and never logs it,
# POST /admin/reload does what SIGHUP does, and a non-loopback admin listener without a token is
# refused at validation.
set -uo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"

token=cli-T0ken-5b1e93
printf '%s\n' "$token" > "$dir/token"
config() {  # config INSTANCE_NAMES [EXTRA_YAML]
  {
    printf 'listen: 127.0.0.1:0\nhealth: {interval: 0}\n'
    printf 'admin: {listen: 127.0.0.1:0, token_file: %s}\n' "$dir/token"
    printf '%s\n' "${2:-}"
    printf 'instances:\n'
    local port=9001
    for name in $1; do printf '  - {name: %s, url: "http://127.0.0.1:%s"}\n' "$name" $((port++)); done
  } > "$dir/router.yaml.new"
  mv "$dir/router.yaml.new" "$dir/router.yaml"
}

check "help documents SIGHUP" bash -c "'$bin' serve --help | grep -q SIGHUP"
check "help documents the admin listener" bash -c "'$bin' serve --help | grep -q 'token_file'"

# A non-loopback admin listener needs a token.
printf 'instances: [{url: "http://127.0.0.1:9001"}]\nadmin: {listen: "0.0.0.0:9090"}\n' > "$dir/open.yaml"
err=$("$bin" serve --check-config --config "$dir/open.yaml" 2>&1); rc=$?
check "non-loopback admin without token refused" \
  bash -c "test $rc = 2 && echo '$err' | grep -q 'admin.listen.*not a loopback address'"

config "a"
"$bin" serve --config "$dir/router.yaml" >"$dir/log" 2>&1 &
pid=$!
check "started" eventually grep -q 'admin listening on' "$dir/log"
port=$(grep -o 'prefix-router listening on [0-9.]*:[0-9]*' "$dir/log" | sed 's/.*://')
admin=$(grep -o 'admin listening on [0-9.]*:[0-9]*' "$dir/log" | sed 's/.*://')
api() { curl -s -o "$dir/body" -w '%{http_code}' -H "Authorization: Bearer $token" "$@"; }

check "one instance at start" bash -c "curl -s http://127.0.0.1:$port/health | grep -q '\"a\":\"up\"'"
check "admin without token is 401" test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/admin/instances")" = 401
check "admin with token is 200" test "$(api "http://127.0.0.1:$admin/admin/instances")" = 200

# SIGHUP with a second instance: it joins.
config "a b"
kill -HUP $pid
check "SIGHUP adds an instance" eventually bash -c "curl -s http://127.0.0.1:$port/health | grep -q '\"b\":\"up\"'"
check "SIGHUP logs what changed" eventually grep -q 'config reloaded (SIGHUP): added instance b' "$dir/log"

# SIGHUP with an invalid file: refused, the running configuration stays, the process lives.
config "a b c" "routing: {prefix_length: 10}"
kill -HUP $pid
check "invalid SIGHUP reload is refused" eventually grep -q 'config reload (SIGHUP) rejected.*routing.prefix_length: 10' "$dir/log"
check "old configuration stays" bash -c "curl -s http://127.0.0.1:$port/health | grep -v '\"c\"' | grep -q '\"b\":\"up\"'"
check "still running" kill -0 $pid

# The same through the admin endpoint, with a field that needs a restart.
config "b" "timeouts: {connect: 7}"
check "admin reload is 200" test "$(api -X POST "http://127.0.0.1:$admin/admin/reload")" = 200
check "admin reload reports restart fields" grep -q '"restart_required":\["timeouts.connect"\]' "$dir/body"
check "admin reload removed a" bash -c "curl -s http://127.0.0.1:$port/health | grep -v '\"a\"' | grep -q '\"b\":\"up\"'"
check "admin drain" test "$(api -X POST "http://127.0.0.1:$admin/admin/instances/b/drain")" = 200
check "drained shows in /health" bash -c "curl -s http://127.0.0.1:$port/health | grep -q '\"b\":\"drained\"'"

kill -TERM $pid; wait $pid; rc=$?; pid=
check "SIGTERM exits 0" test $rc = 0
check "token never logged" bash -c "! grep -q '$token' '$dir/log'"

summary
