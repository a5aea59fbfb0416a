#!/usr/bin/env bash
# Configures and builds gpu-devwatch in ./build. Idempotent.
#   scripts/build.sh            everything: the daemon, every test, the benches
#   scripts/build.sh TARGET...  only those (scripts/run.sh: first-run, the daemon and the demo)
set -euo pipefail
cd "$(dirname "$0")/.."
# GDW_WERROR=ON|OFF (environment): compiler warnings as errors; unset, the cache keeps its value.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo ${GDW_WERROR:+-DGDW_WERROR=$GDW_WERROR} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "$(nproc)" "${targets[@]}"
