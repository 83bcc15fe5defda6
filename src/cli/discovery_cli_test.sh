#!/usr/bin/env bash
# Discovery from the outside (docs/discovery.md), run by CTest with the binary's path as $1: a
# `resolve: all` instance found through a hosts file becomes one instance per address and
# follows edits to the file (an emptied file keeps the set); served names come from each
# engine emulator's /v1/models, so an adapter only one of them has routes there; bad discovery
# fields are refused by --check-config with the field named.
set -uo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"

# Refused at validation, naming the field.
printf 'instances: [{url: "http://10.0.0.1:8000", resolve: all}]\n' > "$dir/bad1.yaml"
err=$("$bin" serve --check-config --config "$dir/bad1.yaml" 2>&1)
check "resolve: all needs a DNS name" grep -q "instances\[0\].resolve: 'all' needs a DNS name" <<<"$err"
printf 'instances: [{url: "http://127.0.0.1:8000"}]\ndiscovery: {models_interval: 0}\n' > "$dir/bad2.yaml"
err=$("$bin" serve --check-config --config "$dir/bad2.yaml" 2>&1)
check "models_interval range" grep -q 'discovery.models_interval: 0 is outside the allowed range \[1, 86400\]' <<<"$err"

# Two engines on one port, one on 127.0.0.1 and one on ::1, each with its own adapter. The port
# is drawn below Linux's ephemeral range (32768-60999), where no test's client connection can
# hold it; another test may still have bound it, so a draw whose engines do not both start is
# redrawn (at most 5 times).
started=no
for _ in 1 2 3 4 5; do
  eport=$((20000 + RANDOM % 12000))
  "$bin" engine --listen "127.0.0.1:$eport" --model base --adapter lora-v4 >"$dir/e4.log" 2>&1 &
  e4=$!
  "$bin" engine --listen "::1:$eport" --model base --adapter lora-v6 >"$dir/e6.log" 2>&1 &
  e6=$!
  if eventually bash -c "curl -sf http://127.0.0.1:$eport/v1/models >/dev/null && curl -sf 'http://[::1]:$eport/v1/models' >/dev/null"; then
    pids+=("$e4" "$e6")
    started=yes
    break
  fi
  kill "$e4" "$e6" 2>/dev/null; wait "$e4" "$e6" 2>/dev/null
done
check "engines answer" test "$started" = yes

printf '127.0.0.1 llm.local\n' > "$dir/hosts"
cat > "$dir/router.yaml" <<EOF
listen: 127.0.0.1:0
health: {interval: 0}
discovery: {hosts_file: $dir/hosts, resolve_interval: 1, models: true, models_interval: 1}
instances:
  - {name: vllm, url: "http://llm.local:$eport", resolve: all}
EOF
"$bin" serve --config "$dir/router.yaml" >"$dir/log" 2>&1 &
pids+=($!)
chat_is() { test "$(chat "$1")" = "$2"; }
check "started" eventually grep -q 'prefix-router listening on' "$dir/log"
port=$(grep -o 'prefix-router listening on [0-9.]*:[0-9]*' "$dir/log" | sed 's/.*://')
chat() {  # chat MODEL: the instance that served it, or the status
  curl -s -o /dev/null -D - -w 'status %{http_code}\n' -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1}" \
    "http://127.0.0.1:$port/v1/chat/completions" | tr -d '\r' |
    awk '/^x-prefix-router-instance:/ {print $2; found=1} /^status / && !found {print}'
}
check "one instance per address" bash -c "curl -s http://127.0.0.1:$port/health | grep -q '\"vllm@127.0.0.1:$eport\":\"up\"'"

printf '127.0.0.1 llm.local\n::1 llm.local\n' > "$dir/hosts"
check "an address added to the hosts file becomes an instance" \
  eventually bash -c "curl -s http://127.0.0.1:$port/health | grep -q '\"vllm@\[::1\]:$eport\":\"up\"'"
check "the change is logged" grep -q 'instances resolved.*added=\[::1\]' "$dir/log"
check "adapters are discovered" eventually bash -c "curl -s http://127.0.0.1:$port/v1/models | grep -q lora-v6"
check "lora-v4 goes to the IPv4 engine" eventually chat_is lora-v4 "vllm@127.0.0.1:$eport"
check "lora-v6 goes to the IPv6 engine" eventually chat_is lora-v6 "vllm@[::1]:$eport"
check "an unknown adapter is 404" chat_is lora-x "status 404"

printf '# nothing\n' > "$dir/hosts"
check "an empty answer is logged" eventually grep -q 'resolution failed; the instance keeps its addresses' "$dir/log"
h=$(curl -s "http://127.0.0.1:$port/health")
check "an empty answer keeps the IPv6 instance" grep -q "\"vllm@\[::1\]:$eport\":\"up\"" <<<"$h"
check "an empty answer keeps the IPv4 instance" grep -q "\"vllm@127.0.0.1:$eport\":\"up\"" <<<"$h"
printf '::1 llm.local\n' > "$dir/hosts"
check "an address removed from the hosts file goes" \
  eventually bash -c "! curl -s http://127.0.0.1:$port/health | grep -q 'vllm@127.0.0.1'"
check "lora-v4 is gone with its engine's address" eventually chat_is lora-v4 "status 404"

summary
