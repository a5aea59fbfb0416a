#!/usr/bin/env bash
# Builds .gpubundle.tgz: gpu-devwatch, the real-GPU test (test/gpu, label gpu) and the v2
# reaction bench (bench/v2_reaction; on a pure v2 host it measures v2 alone, its fixture nodes
# on majors no real driver holds), plus any binaries named as arguments (another daemon build
# to compare with, say), with every library they link and their own loader, patched to run from /tmp/gdwb on a GPU machine of
# another distribution. Such a machine (see the real-GPU notes the project keeps) has another
# glibc and no package registry, so the build is carried there whole:
#   - each binary's interpreter is the bundled loader, /tmp/gdwb/lib/ld-linux-x86-64.so.2;
#   - its DT_RPATH (--force-rpath) is /tmp/gdwb/lib. DT_RUNPATH would not apply to a
#     library's own dependencies: libbpf would load the machine's libelf, which needs a newer
#     glibc. No LD_LIBRARY_PATH: nvidia-smi and python3, which the test starts inside the pod
#     cgroup, would load the old libc too. NVML (libnvidia-ml.so.1) is still found through
#     the machine's own ld.so.cache. Not run through `ld-linux --library-path`: that breaks
#     /proc/self/exe, from which the daemon starts its NVML child.
# The test finds the daemon beside itself. It needs no helper program: it re-applies device
# programs itself, built from raw bpf_insn at run time (the machine has no clang for BPF).
#
# Here:            scripts/gpu-bundle.sh [BINARY…]  (as root: installs patchelf if missing)
# On the GPU machine, as root, from the directory holding .gpubundle.tgz:
#   mkdir -p /tmp/gdwb && tar xzf .gpubundle.tgz -C /tmp/gdwb && /tmp/gdwb/gpu_real_gpu_test
# (GDW_GPU_PYTHON names a python3 with torch if `python3` is not it.) Through this
# workplace's device tool: `run` with carry [".gpubundle.tgz"] and that command line.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${GDW_BUILD_DIR:-build}
prefix=/tmp/gdwb
binaries=("$build/daemon/gpu-devwatch" "$build/test/gpu_real_gpu_test" "$build/bench/v2_reaction" "$@")

command -v patchelf >/dev/null || apt-get install -y patchelf
[[ -f "$build/CMakeCache.txt" ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j2 --target gpu-devwatch gpu_real_gpu_test v2_reaction

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
for bin in "${binaries[@]}"; do
  # What the build links (before patching), the loader included.
  ldd "$bin" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | grep / | xargs -I{} cp -L {} "$stage/lib/"
  cp "$bin" "$stage/"
  strip "$stage/$(basename "$bin")"
  patchelf --set-interpreter "$prefix/lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$prefix/lib" \
    "$stage/$(basename "$bin")"
done
[[ -f "$stage/lib/ld-linux-x86-64.so.2" ]] || { echo "gpu-bundle.sh: no ld-linux-x86-64.so.2 in ldd's output" >&2; exit 1; }

tar czf .gpubundle.tgz -C "$stage" .
echo "gpu-bundle.sh: .gpubundle.tgz ($(du -h .gpubundle.tgz | cut -f1)): $(cd "$stage" && echo * lib/*)"
