#!/usr/bin/env bash
# The example configurations, run by CTest with the binary's path as $1 and the repository root
# as $2: every examples/*.yaml and the packaged default config pass `serve --check-config`, and
# broken configurations fail with exit 2 and a message naming the field.
set -uo pipefail
bin=$1
root=${2:-.}
fails=0; passes=0
check() {  # check NAME COMMAND...: passes when the command succeeds
  local name=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

n=0
for f in "$root"/examples/*.yaml "$root"/packaging/router.yaml; do
  # Both spellings: --check-config FILE, and --check-config --config FILE.
  if [ $((n % 2)) = 0 ]; then
    out=$("$bin" serve --check-config "$f" 2>&1); rc=$?
  else
    out=$("$bin" serve --check-config --config "$f" 2>&1); rc=$?
  fi
  check "$(basename "$f") passes --check-config" test $rc = 0
  check "$(basename "$f"): one-line summary" bash -c "test \$(printf '%s\n' \"\$1\" | wc -l) = 1 && printf '%s' \"\$1\" | grep -q '^configuration OK: [0-9]* instances, [0-9]* pools, listen '" _ "$out"
  [ $rc = 0 ] || echo "$out"
  n=$((n + 1))
done
check "at least the four examples" test $n -ge 4

# broken NAME YAML EXPECTED: the file fails with exit 2 and EXPECTED (a grep pattern) in stderr.
broken() {
  printf '%s\n' "$2" >"$dir/broken.yaml"
  local err rc
  err=$("$bin" serve --check-config --config "$dir/broken.yaml" 2>&1 >/dev/null); rc=$?
  check "broken: $1" bash -c "test $rc = 2 && printf '%s' \"\$1\" | grep -q -- \"\$2\"" _ "$err" "$3"
  [ $rc = 2 ] || echo "  exit $rc: $err"
}
broken "unknown key" $'instances: [{url: "http://127.0.0.1:1"}]\nrouting: {strategy: prefix-aware}' \
  "routing.strategy"
broken "no instances" 'listen: 127.0.0.1:8080' "instances"
broken "bad url" 'instances: [{url: "ftp://x"}]' "instances\[0\].url"
broken "bad strategy" $'instances: [{url: "http://127.0.0.1:1"}]\nrouting: {routing_strategy: fastest}' \
  "routing.routing_strategy: 'fastest' is not one of"
broken "out of range" $'instances: [{url: "http://127.0.0.1:1"}]\npools: {m: {concurrency_threshold: 0}}' \
  "pools.m.concurrency_threshold: 0 is outside the allowed range 1..1024"
broken "not YAML" $'instances: [\n  - {url' "invalid configuration"
"$bin" serve --check-config "$root/examples/router.yaml" --config "$root/examples/tenants.yaml" >/dev/null 2>&1
check "two different files refused" test $? = 2
check "missing file" bash -c "'$bin' serve --check-config --config '$dir/absent.yaml' 2>&1 >/dev/null | grep -q absent.yaml"

echo "$passes passed, $fails failed"
test $fails = 0
