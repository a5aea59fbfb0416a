#!/usr/bin/env bash
# The test command (README, .ci/run): installs what is needed, builds, runs every ctest
# test (unit, integration, privileged — the privileged ones need root), then each libFuzzer
# target for a bounded time. Under CI (CI=true) a skipped privileged test is a failure:
# CI runs as root on a machine where they must run. A skipped `gpu` test (test/gpu) is not:
# it needs a real NVIDIA GPU, which CI does not have.
#
# On amd64 it also cross-builds for arm64 (scripts/build.sh --arch arm64, into build-arm64:
# the daemon, the unit tests and the arm64 kernel matrix cell's guest tests) and runs the
# unit tests there under qemu-user (ctest -L unit: CMAKE_CROSSCOMPILING_EMULATOR); the arm64
# cell (privileged.kernel_matrix.arm64_6_1) runs with the other ctest tests. GDW_ARM64=0
# leaves arm64 out (that cell included: it is not registered).
set -euo pipefail
cd "$(dirname "$0")/.."

arm64=0
if [[ "$(dpkg --print-architecture)" == amd64 && "${GDW_ARM64:-1}" != 0 ]]; then arm64=1; fi
scripts/install-deps.sh
# Under CI a compiler warning fails the build (CMakeLists.txt, GDW_WERROR).
werror=()
if [[ "${CI:-}" == "true" ]]; then werror=(env GDW_WERROR=ON); fi
"${werror[@]}" scripts/build.sh
if ((arm64)); then "${werror[@]}" scripts/build.sh --arch arm64 gpu-devwatch unit-tests arm64-guest-tests; fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# What earlier runs that were killed (SIGKILL: no cleanup ran) left on this node: their test
# cgroups, tracefs instances still tracing, mounts. Removed before they skew this run.
if [[ $EUID -eq 0 ]]; then python3 test/support/stale_test_state.py || true; fi
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600) 2>&1 | tee "$log" || status=$?
# What this run left: a test that broke the rule that it removes what it made, even when it
# fails (or one that ctest killed at its timeout, which fails anyway).
if [[ $EUID -eq 0 ]] && ! python3 test/support/stale_test_state.py --fail-if-found; then
  echo "test.sh: tests left cgroups, tracefs instances or mounts behind (removed now)" >&2
  status=1
fi

if [[ "${CI:-}" == "true" ]]; then
  # Only the privileged label: gpu.* tests skip wherever there is no GPU.
  skipped=$(grep -E '^\s*[0-9]+ - privileged\..*\(Skipped\)' "$log" || true)
  if [[ -n "$skipped" ]]; then
    echo "test.sh: privileged tests were skipped under CI (they must run as root here):" >&2
    echo "$skipped" >&2
    status=1
  fi
fi

if ((arm64)); then
  echo "test.sh: the arm64 build's unit tests, under qemu-user" >&2
  (cd build-arm64 && ctest -L unit --output-on-failure -j "$(nproc)" --timeout 600) || status=1
fi

scripts/fuzz.sh "${GDW_FUZZ_SECONDS:-20}" || status=1

if [[ $status -eq 0 ]]; then echo "test.sh: all tests passed"; else echo "test.sh: FAILED" >&2; fi
exit $status
