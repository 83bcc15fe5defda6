# The prefix-router image: the binary the Debian package ships, built from this tree, on Debian 12.
#
#   podman build --build-arg BASE=localhost/debian:12 -t localhost/prefix-router:0.1.0 .
#
# BASE is a Debian 12 (bookworm) image with working apt sources: docker.io/library/debian:12
# where a registry is reachable, or the local one scripts/image.sh makes from Debian's mirror
# (mmdebstrap, then podman import). deploy/Dockerfile.prebuilt is the variant without RUN steps,
# for machines that cannot run them (docs/kubernetes.md says which steps were verified where).
ARG BASE=localhost/debian:12

# ---- build: the release tree, configured as scripts/build.sh release configures it (tests and
# benchmarks off: neither is in the package), then the .deb with cpack, as docs/install.md does.
FROM ${BASE} AS build
# The build packages of scripts/setup.sh (without the test, benchmark, fuzzing and browser tools),
# and gRPC/protobuf for the endpoint picker (docs/epp.md). dpkg-dev: cpack derives the package's
# dependencies with dpkg-shlibdeps, so the runtime stage installs exactly the libraries the
# binary links.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config dpkg-dev file \
      libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev \
      libsimdjson-dev libxxhash-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev \
      libzmq3-dev nlohmann-json3-dev libssl-dev \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# JOBS: ninja's parallel jobs (empty = one per core).
ARG JOBS=
RUN cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPR_BUILD_TESTS=OFF -DPR_BUILD_BENCHMARKS=OFF \
 && ninja -C build/release ${JOBS:+-j $JOBS} \
 && build/release/src/prefix-router --version \
 && cd build/release && cpack -G DEB -B /out

# ---- runtime: the .deb installed with apt, which brings the shared libraries it depends on and
# nothing else (no compiler, no headers). Its maintainer scripts do nothing without systemd.
FROM ${BASE}
COPY --from=build /out/prefix-router_*.deb /tmp/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/prefix-router_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/prefix-router_*.deb /lib/systemd/system/prefix-router.service
# The image's default configuration listens on every address (the .deb's listens on loopback,
# which is useless in a container). Kubernetes mounts its ConfigMap over /etc/prefix-router.
COPY deploy/router.yaml /etc/prefix-router/router.yaml
# A numeric user, so that Kubernetes can check runAsNonRoot without an /etc/passwd entry; the
# gateway writes nothing to disk (logs go to stdout), so the root file system can be read-only.
USER 65532:65532
# 8080: the client listener (HTTP proxy, /health, /metrics); 9002: the endpoint picker (gRPC
# ext_proc, epp.listen). The admin listener stays on loopback (kubectl port-forward reaches it).
EXPOSE 8080 9002
ENTRYPOINT ["prefix-router"]
CMD ["serve", "--config", "/etc/prefix-router/router.yaml"]
