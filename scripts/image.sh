#!/usr/bin/env bash
# Builds the container image on this machine with podman, from Debian packages only (no registry
# needed). Not part of CI: it downloads a Debian root file system and needs root.
#
#   scripts/image.sh            base, then prebuilt, then check (the steps that work here)
#   scripts/image.sh base       Debian 12 minbase from Debian's mirror (mmdebstrap), imported as
#                               $BASE (default localhost/debian:12); the tar stays in $WORK
#   scripts/image.sh prebuilt   deploy/Dockerfile.prebuilt: the .deb of build/release (cpack),
#                               unpacked, plus the shared libraries the base lacks; COPY only.
#                               Needs build/release (bash scripts/build.sh release)
#   scripts/image.sh full       the Dockerfile: builds from source in a build stage (RUN steps;
#                               ISOLATION=chroot where the OCI runtime cannot run them, JOBS=N)
#   scripts/image.sh check      the image's binary: `podman run IMAGE --version`, and, when
#                               containers cannot run here, the same binary chrooted into an
#                               exported copy of the image (its libraries, not the host's)
#
# Environment: BASE, IMAGE (default localhost/prefix-router:VERSION, VERSION from CMakeLists.txt:
# the image deploy/kubernetes/ names), WORK (default build/image), SUITE (default bookworm).
# docs/kubernetes.md records what each step printed on the project's machines.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^project(prefix_router VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
image_name=localhost/prefix-router
image=${IMAGE:-$image_name:$version}
base=${BASE:-localhost/debian:12}
work=${WORK:-build/image}
suite=${SUITE:-bookworm}
mkdir -p "$work"
work=$(cd "$work" && pwd)

need() {  # need COMMAND PACKAGE: installs PACKAGE from Debian when COMMAND is missing
  command -v "$1" >/dev/null && return
  echo "image.sh: installing $2"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2"
}

step_base() {
  need mmdebstrap mmdebstrap
  need podman podman
  # minbase: apt, dpkg and the essential set (glibc, libstdc++, coreutils); the full Dockerfile's
  # stages need apt, the prebuilt one only the C and C++ runtimes.
  echo "== base: mmdebstrap --variant=minbase $suite -> $work/rootfs.tar"
  mmdebstrap --variant=minbase "$suite" "$work/rootfs.tar"
  echo "== base: podman import -> $base"
  podman import "$work/rootfs.tar" "$base"
}

step_prebuilt() {
  need podman podman
  local bin=build/release/src/prefix-router
  [ -x "$bin" ] || { echo "image.sh: $bin is missing: run bash scripts/build.sh release" >&2; exit 1; }
  [ -f "$work/rootfs.tar" ] || { echo "image.sh: $work/rootfs.tar is missing: run scripts/image.sh base" >&2; exit 1; }
  local ctx=$work/context
  rm -rf "$ctx" "$work/deb"
  mkdir -p "$ctx/rootfs"
  # The package's files, exactly (stripped binary, config, docs): docs/install.md's .deb.
  echo "== prebuilt: cpack -G DEB from build/release"
  cpack -G DEB --config build/release/CPackConfig.cmake -B "$work/deb" >"$work/cpack.log"
  dpkg-deb -x "$work"/deb/prefix-router_*.deb "$ctx/rootfs"
  # The unit is for systemd hosts; and a COPY of a lib/ directory would replace the base's
  # /lib -> usr/lib symlink (merged /usr) with a directory.
  rm -rf "$ctx/rootfs/lib"
  # The libraries the binary links that the base does not have, from the host (the same Debian
  # release, so the same builds as apt would install).
  local have=$work/base-libs.txt
  tar -tf "$work/rootfs.tar" | sed -n 's#^\./usr/lib/x86_64-linux-gnu/##p' >"$have"
  mkdir -p "$ctx/rootfs/usr/lib/x86_64-linux-gnu"
  ldd "$ctx/rootfs/usr/bin/prefix-router" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r soname path; do
      if ! grep -qxF "$soname" "$have"; then
        cp -L "$path" "$ctx/rootfs/usr/lib/x86_64-linux-gnu/$soname"
        echo "   library from the host: $soname"
      fi
    done
  cp deploy/router.yaml "$ctx/router.yaml"
  echo "== prebuilt: podman build -f deploy/Dockerfile.prebuilt -> $image"
  podman build -f deploy/Dockerfile.prebuilt --build-arg "BASE=$base" -t "$image" "$ctx"
}

step_full() {
  need podman podman
  # RUN steps with podman's default isolation (an OCI runtime, crun) fail on machines where crun
  # cannot set up cgroups; ISOLATION=chroot runs them chrooted on the host instead.
  local isolation=${ISOLATION:-oci}
  echo "== full: podman build --isolation $isolation -f Dockerfile -> $image"
  podman build --isolation "$isolation" -f Dockerfile --build-arg "BASE=$base" \
    ${JOBS:+--build-arg "JOBS=$JOBS"} -t "$image" .
}

step_check() {
  need podman podman
  echo "== check: podman run --rm $image --version"
  if podman run --rm "$image" --version; then
    podman run --rm "$image" serve --check-config --config /etc/prefix-router/router.yaml
    return
  fi
  # Containers cannot run here (docs/kubernetes.md): run the image's own files instead. The
  # binary then loads the image's libraries, as it would in a container.
  echo "== check: podman run failed; chroot into an exported copy of the image"
  local root=$work/export ctr
  rm -rf "$root"
  mkdir -p "$root"
  ctr=$(podman create "$image")
  podman export "$ctr" | tar -x -C "$root"
  podman rm "$ctr" >/dev/null
  podman image inspect --format 'User={{.Config.User}} Entrypoint={{.Config.Entrypoint}} Cmd={{.Config.Cmd}} ExposedPorts={{.Config.ExposedPorts}}' "$image"
  chroot --userspec=65532:65532 "$root" /usr/bin/prefix-router --version
  chroot --userspec=65532:65532 "$root" /usr/bin/prefix-router serve --check-config --config /etc/prefix-router/router.yaml
}

case "${1:-all}" in
  base) step_base ;;
  prebuilt) step_prebuilt ;;
  full) step_full ;;
  check) step_check ;;
  all) step_base; step_prebuilt; step_check ;;
  *) echo "usage: scripts/image.sh [base|prebuilt|full|check|all]" >&2; exit 2 ;;
esac
