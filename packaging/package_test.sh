#!/usr/bin/env bash
# The Debian package, end to end, run by CTest as: package_test.sh BUILD_DIR VERSION.
# Builds the .deb from BUILD_DIR with cpack, checks its metadata and contents, unpacks it into a
# temporary root, verifies the systemd unit offline (systemd need not be running), then runs the
# unpacked binary with the unpacked config: --check-config, and the unit's own ExecStart line
# serving on an ephemeral port until /health answers.
set -uo pipefail
SECONDS=0
phase() { echo "[$SECONDS s] $*"; }
build=$1
version=$2
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0; passes=0
check() {  # check NAME COMMAND...: passes when the command succeeds
  local name=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}

# 1. cpack builds one .deb (into the temporary directory: concurrent runs do not collide).
if ! cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1; then
  cat "$tmp/cpack.log"; echo "FAIL: cpack"; exit 1
fi
deb=$(ls "$tmp"/out/prefix-router_*.deb 2>/dev/null | head -1)
check "a .deb was built" test -f "$deb"
[ -f "$deb" ] || exit 1
echo "package: $(basename "$deb")"

phase "cpack done"
# 2. Metadata: name, the project's version, dependencies on the shared libraries, conffiles.
info=$(dpkg-deb -I "$deb")
field() { dpkg-deb -f "$deb" "$1"; }
check "package name" test "$(field Package)" = prefix-router
check "version is the project's" test "$(field Version)" = "$version-1"
check "architecture" test "$(field Architecture)" = "$(dpkg --print-architecture)"
for lib in libyaml-cpp libspdlog libfmt libsimdjson libboost-json libxxhash libzmq5 libc6 libstdc++6; do
  check "depends on $lib" bash -c "dpkg-deb -f '$deb' Depends | grep -q '$lib'"
done
check "description" bash -c "dpkg-deb -f '$deb' Description | grep -qi 'prefix'"
check "conffiles lists the config" bash -c "dpkg-deb --ctrl-tarfile '$deb' | tar -xO ./conffiles | grep -qx /etc/prefix-router/router.yaml"
for script in postinst prerm postrm; do
  check "control archive has $script" bash -c "echo \"\$1\" | grep -q ' $script '" _ "$info"
done
check "description is one paragraph" bash -c "! dpkg-deb -f '$deb' Description | grep -q ';'"

phase "metadata checked"
# 3. Contents.
root=$tmp/root
dpkg-deb -x "$deb" "$root"
check "binary installed" test -x "$root/usr/bin/prefix-router"
check "config installed" test -f "$root/etc/prefix-router/router.yaml"
check "config world-readable (DynamicUser)" test "$(stat -c %a "$root/etc/prefix-router/router.yaml")" = 644
unit=$root/lib/systemd/system/prefix-router.service
check "unit installed" test -f "$unit"
check "examples installed" bash -c "ls '$root'/usr/share/doc/prefix-router/examples/*.yaml >/dev/null"
check "version of the unpacked binary" bash -c "'$root/usr/bin/prefix-router' --version | grep -qx 'prefix-router $version'"

phase "unpacked"
# 4. The unit: what it must say, then systemd's own offline checks. Its paths point into the
# unpacked root in a copy (verify wants the ExecStart binaries to exist; --root would need a
# whole systemd tree under it).
for line in 'ExecStart=/usr/bin/prefix-router serve --config /etc/prefix-router/router.yaml' \
            'ExecReload=/bin/kill -HUP $MAINPID' 'Restart=on-failure' 'DynamicUser=yes' \
            'NoNewPrivileges=yes' 'ProtectSystem=strict' 'ProtectHome=yes' 'PrivateTmp=yes' \
            'PrivateDevices=yes' 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
            'CapabilityBoundingSet=' 'SystemCallFilter=@system-service'; do
  check "unit has $line" grep -qxF "$line" "$unit"
done
mkdir -p "$tmp/units"
sed -e "s#/usr/bin/prefix-router#$root/usr/bin/prefix-router#g" \
    -e "s#/etc/prefix-router/#$root/etc/prefix-router/#g" "$unit" >"$tmp/units/prefix-router.service"
if command -v systemd-analyze >/dev/null; then
  out=$(systemd-analyze verify "$tmp/units/prefix-router.service" 2>&1); rc=$?
  [ -n "$out" ] && echo "$out"
  check "systemd-analyze verify is silent and succeeds" test $rc = 0 -a -z "$out"
  # Exposure 0 (locked down) .. 10 (unprotected); the unit scores about 1.4.
  out=$(systemd-analyze security --offline=yes --threshold=20 "$tmp/units/prefix-router.service" 2>&1); rc=$?
  check "systemd-analyze security exposure at most 2.0" test $rc = 0
  [ $rc = 0 ] || echo "$out" | tail -3
else
  echo "FAIL: systemd-analyze not installed (scripts/setup.sh installs systemd)"; fails=$((fails + 1))
fi

phase "unit verified"
# 5. The unpacked binary with the unpacked config.
out=$("$root/usr/bin/prefix-router" serve --check-config --config "$root/etc/prefix-router/router.yaml" 2>&1); rc=$?
check "default config passes --check-config" bash -c "test $rc = 0 && echo '$out' | grep -q 'configuration OK'"
# The unit's ExecStart, as rewritten, plus an ephemeral port (8080 may be taken here).
exec_start=$(sed -n 's/^ExecStart=//p' "$tmp/units/prefix-router.service")
log=$tmp/serve.log
$exec_start --listen 127.0.0.1:0 >"$log" 2>&1 &
pid=$!
port=
for _ in $(seq 100); do
  port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$log" | head -1 | sed 's/.*://')
  [ -n "$port" ] && break
  sleep 0.1
done
check "serves on an ephemeral port" test -n "$port"
if [ -n "$port" ]; then
  code=$(curl -s -o "$tmp/health.json" -w '%{http_code}' "http://127.0.0.1:$port/health")
  check "/health answers" bash -c "test '$code' = 200 -o '$code' = 503"
  check "/health is JSON" python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/health.json"
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")
  check "/v1/models answers 200" test "$code" = 200
fi
phase "requests answered"
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
check "SIGTERM exits 0" test $rc = 0
[ $fails = 0 ] || cat "$log"

echo "$passes passed, $fails failed"
test $fails = 0
