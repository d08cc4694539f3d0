#!/usr/bin/env bash
# Runs every libFuzzer target for a fixed budget with its generated seed corpus and saved crash
# inputs; fails on any finding (the input is kept in build-fuzz/findings/ — add it to
# tests/fuzz/regressions/<target>/ once fixed). Usage: scripts/fuzz.sh [seconds-per-target]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
scripts/deps.sh clang libclang-rt-14-dev

jobs=$(nproc 2>/dev/null || echo 2)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DFFLITE_FUZZ=ON \
  -DFFLITE_BUILD_TOOLS=OFF >build-fuzz.configure.log 2>&1 || { cat build-fuzz.configure.log; exit 1; }
cmake --build build-fuzz -j"$jobs" --target fuzz_all >build-fuzz.build.log 2>&1 || { tail -50 build-fuzz.build.log; exit 1; }

seeds=build-fuzz/seeds
rm -rf "$seeds" build-fuzz/corpus build-fuzz/findings
mkdir -p build-fuzz/corpus build-fuzz/findings
build-fuzz/tests/fuzz/make_fuzz_seeds "$seeds" >/dev/null

status=0
passed=0
failed=0
while read -r target; do
  [ -n "$target" ] || continue
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus"
  log=build-fuzz/$target.log
  echo "== fuzz $target for ${seconds}s =="
  if build-fuzz/tests/fuzz/"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix=build-fuzz/findings/"$target"- \
      "$corpus" "$seeds/$target" tests/fuzz/regressions/"$target" >"$log" 2>&1; then
    runs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "   $target: $runs executions, no findings"
    passed=$((passed + 1))
  else
    tail -40 "$log"
    echo "   $target: FINDING (input in build-fuzz/findings/)"
    status=1
    failed=$((failed + 1))
  fi
done < build-fuzz/tests/fuzz/targets.txt
echo "fuzz: $passed passed, $failed failed"
exit $status
