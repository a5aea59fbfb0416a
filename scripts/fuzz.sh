#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan, every parser library instrumented) in
# ./build-fuzz and runs each for a bounded time from a copy of its committed seed corpus.
#   scripts/fuzz.sh [seconds per target, default 20]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DGDW_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" >/dev/null

status=0
for fuzzer in build-fuzz/test/fuzz/*_fuzz; do
  name=$(basename "$fuzzer")
  work=$(mktemp -d)
  if [[ -d test/fuzz/corpus/$name ]]; then cp -r "test/fuzz/corpus/$name/." "$work/"; fi
  if "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
      -print_final_stats=1 "$work" >"$work.log" 2>&1; then
    runs=$(grep -m1 'stat::number_of_executed_units' "$work.log" | awk '{print $2}')
    echo "fuzz: $name ok (${runs:-?} runs in ${seconds}s)"
  else
    echo "fuzz: $name FAILED" >&2
    tail -n 40 "$work.log" >&2
    status=1
  fi
  rm -rf "$work" "$work.log"
done
exit $status
