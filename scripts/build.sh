#!/usr/bin/env bash
# Configures and builds gpu-devwatch in ./build (amd64) or ./build-arm64 (the arm64
# cross-build). Idempotent.
#   scripts/build.sh            everything: the daemon, every test, the benches
#   scripts/build.sh TARGET...  only those (scripts/run.sh: first-run, the daemon and the demo)
#   scripts/build.sh --arch arm64 [TARGET...]
#                               cross-built for arm64 into ./build-arm64 with
#                               cmake/toolchain-aarch64.cmake (g++-aarch64-linux-gnu and
#                               Debian's :arm64 libraries: scripts/install-deps.sh arm64);
#                               its tests run under qemu-user (scripts/test.sh)
# GDW_JOBS (environment): parallel jobs (default: the number of CPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(dpkg --print-architecture 2>/dev/null || echo amd64)
arch=$host
if [[ ${1:-} == --arch ]]; then arch=$2; shift 2; fi
if [[ $arch == "$host" ]]; then
  build_dir=build; toolchain=()              # a native build, on amd64 or on arm64
elif [[ $arch == arm64 && $host == amd64 ]]; then
  build_dir=build-arm64; toolchain=(-DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchain-aarch64.cmake")
else
  echo "build.sh: cannot build for $arch on $host (--arch $host, or arm64 on amd64)" >&2; exit 2
fi
# GDW_WERROR=ON|OFF (environment): compiler warnings as errors; unset, the cache keeps its value.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${toolchain[@]}" \
  ${GDW_WERROR:+-DGDW_WERROR=$GDW_WERROR} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "${GDW_JOBS:-$(nproc)}" "${targets[@]}"
