#!/usr/bin/env bash
# Installs every Debian 12 package prefix-router needs to build, test and benchmark (dpkg-dev and
# systemd: the package test derives the .deb's dependencies and verifies the unit offline).
# Usage: scripts/setup.sh            (as root, or with sudo available)
# Boost comes as 1.81 (libboost1.81-dev). Never install libboost-dev (1.74) or anything that
# pulls it in (libmsgpack-cxx-dev among them): the two versions conflict.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang-14 libclang-rt-14-dev
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libsimdjson-dev libxxhash-dev
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libzmq3-dev nlohmann-json3-dev
  libssl-dev openssl
  libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc protobuf-compiler
  valgrind python3 curl
  dpkg-dev systemd
  haproxy nginx wrk
  chromium fonts-liberation
)

sudo_cmd=()
if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# Node.js and npm, for the OpenAI SDK integration test (tests/openai-client, Node.js >= 20) and
# the status page's browser test (tests/status-page: playwright-core drives the chromium above).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs npm"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq nodejs npm
fi
