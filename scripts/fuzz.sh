#!/usr/bin/env bash
# Runs every libFuzzer target for a fixed budget with its generated seed corpus and saved crash
# inputs, all targets at once; fails on any finding (the input is kept in
# build-fuzz/findings/ — add it to tests/fuzz/regressions/<target>/ once fixed).
# Usage: scripts/fuzz.sh [seconds-per-target [BUILD_DIR]]
#   BUILD_DIR: a tree already configured with -DFFLITE_FUZZ=ON (clang), whose fuzz targets are
#   built (if they are not) and run; the test command passes its sanitizer stage's. Without it,
#   build-fuzz/ is configured and built here.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${2:-}
scripts/deps.sh clang libclang-rt-14-dev

jobs=$(nproc 2>/dev/null || echo 2)
if [ -z "$build" ]; then
  build=build-fuzz
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFFLITE_FUZZ=ON \
    -DFFLITE_BUILD_TOOLS=OFF >build-fuzz.configure.log 2>&1 || { cat build-fuzz.configure.log; exit 1; }
elif ! grep -qE '^FFLITE_FUZZ:[A-Z]+=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "fuzz.sh: $build is not a tree configured with -DFFLITE_FUZZ=ON" >&2
  exit 1
fi
cmake --build "$build" -j"$jobs" --target fuzz_all >build-fuzz.build.log 2>&1 || { tail -50 build-fuzz.build.log; exit 1; }

# The runs' files stay in build-fuzz/ whichever tree the targets come from.
mkdir -p build-fuzz
seeds=build-fuzz/seeds
rm -rf "$seeds" build-fuzz/corpus build-fuzz/findings
mkdir -p build-fuzz/corpus build-fuzz/findings
"$build"/tests/fuzz/make_fuzz_seeds "$seeds" >/dev/null

# One target: its budget (wall seconds), its corpus, its log; writes "ok <executions>" or
# "finding" to its result.
run_target() {
  local target=$1 wall=$2 corpus=build-fuzz/corpus/$1 log=build-fuzz/$1.log
  mkdir -p "$corpus"
  if "$build"/tests/fuzz/"$target" -max_total_time="$wall" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix=build-fuzz/findings/"$target"- \
      "$corpus" "$seeds/$target" tests/fuzz/regressions/"$target" >"$log" 2>&1; then
    echo "ok $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')" >"$log.result"
  else
    echo "finding" >"$log.result"
  fi
}

# The targets run side by side, all at once: with more targets than cores each runs for
# seconds × targets / cores of wall time, so that each still gets about `seconds` of a core and no
# core idles while the last target runs alone.
targets=()
while read -r target; do
  [ -n "$target" ] && targets+=("$target")
done < "$build"/tests/fuzz/targets.txt
wall=$seconds
if [ "${#targets[@]}" -gt "$jobs" ]; then
  wall=$(((seconds * ${#targets[@]} + jobs - 1) / jobs))
fi
for target in "${targets[@]}"; do
  echo "== fuzz $target for ${wall}s of wall time (about ${seconds}s of a core) =="
  rm -f build-fuzz/"$target".log.result
  run_target "$target" "$wall" &
done
wait

status=0
passed=0
failed=0
for target in "${targets[@]}"; do
  log=build-fuzz/$target.log
  result=$(cat "$log.result" 2>/dev/null || echo "finding")
  if [ "${result%% *}" = ok ]; then
    echo "   $target: ${result#ok } executions, no findings"
    passed=$((passed + 1))
  else
    tail -40 "$log"
    echo "   $target: FINDING (input in build-fuzz/findings/)"
    status=1
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
exit $status
