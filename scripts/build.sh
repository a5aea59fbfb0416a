#!/usr/bin/env bash
# Configures and builds gpu-devwatch (and its tests) in ./build. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
